"""The Order example driven by an agent (see README.md beside this file)."""
