"""The ``sagacity`` command line."""
