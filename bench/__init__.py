"""Benchmarks: scripts that print a results table. Run from the repository root as
``python -m bench.<name>`` (``--help`` lists each one's options)."""
