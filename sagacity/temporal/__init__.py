"""Temporal glue: the workflow-side saga engine, the generic saga workflow, activities, plugin."""
