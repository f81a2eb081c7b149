"""The canonical Order / Product / Inventory example (see README.md beside this file)."""
