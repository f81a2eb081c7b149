"""Assembles the ``sagacity`` command from one module per command group."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="sagacity",
    help="Sagas and a tamper-evident journal for AI-agent tool calls.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Command groups register here, one line each (keep this list sorted).
app.add_typer(__import__("sagacity.cli.approvals", fromlist=["app"]).app, name="approvals")
app.add_typer(__import__("sagacity.cli.db", fromlist=["app"]).app, name="db")
app.command("demo")(__import__("sagacity.cli.demo", fromlist=["demo"]).demo)
app.command("dev")(__import__("sagacity.cli.dev", fromlist=["dev"]).dev)
app.command("export")(__import__("sagacity.cli.export", fromlist=["export"]).export)
app.command("keygen")(__import__("sagacity.cli.export", fromlist=["keygen"]).keygen)
app.add_typer(__import__("sagacity.cli.saga", fromlist=["app"]).app, name="saga")
app.command("verify")(__import__("sagacity.cli.verify", fromlist=["verify"]).verify)
app.command("worker")(__import__("sagacity.cli.worker", fromlist=["worker"]).worker)
