"""Assembles the ``sagacity`` command from one module per command group."""

from __future__ import annotations

import typer

from sagacity.cli import approvals, db, demo, dev, export, saga, verify, worker

app = typer.Typer(
    name="sagacity",
    help="Sagas and a tamper-evident journal for AI-agent tool calls.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Command groups register here, one line each (keep this list sorted).
app.add_typer(approvals.app, name="approvals")
app.add_typer(db.app, name="db")
app.command("demo")(demo.demo)
app.command("dev")(dev.dev)
app.command("export")(export.export)
app.command("keygen")(export.keygen)
app.add_typer(saga.app, name="saga")
app.command("verify")(verify.verify)
app.command("worker")(worker.worker)
