"""Assembles the ``sagacity`` command from one module per command group."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from sagacity.cli import (
    anchors,
    approvals,
    certify,
    db,
    demo,
    dev,
    doctor,
    export,
    halt,
    keyring,
    mcp,
    reconcile,
    rollback,
    saga,
    tlog,
    trust,
    verify,
    witness,
    worker,
)


class _Root(TyperGroup):
    """The ``sagacity`` group: arguments that are not UTF-8 text are refused before any command.

    Python hands undecodable argument bytes over as lone surrogates (``\\udcff``), which no
    Temporal payload or Postgres row can hold; one line and exit 2 instead of a traceback.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for arg in args:
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                typer.echo(f"error: argument {arg!a} is not UTF-8 text", err=True)
                raise typer.Exit(2) from None
        parsed: list[str] = super().parse_args(ctx, args)
        return parsed


app = typer.Typer(
    name="sagacity",
    cls=_Root,
    help="Sagas and a tamper-evident journal for AI-agent tool calls.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Command groups register here, one line each (keep this list sorted).
app.add_typer(anchors.app, name="anchors")
app.add_typer(approvals.app, name="approvals")
app.add_typer(db.app, name="db")
app.command("demo")(demo.demo)
app.command("dev")(dev.dev)
app.command("doctor")(doctor.doctor)
app.command("export")(export.export)
app.command("halt")(halt.halt)
app.command("halts")(halt.halts)
app.command("keygen")(export.keygen)
app.add_typer(keyring.app, name="keyring")
app.add_typer(tlog.app, name="log")
app.command("mcp")(mcp.mcp)
app.command("prove")(tlog.prove)
app.command("reconcile")(reconcile.reconcile_command)
app.command("resume")(halt.resume)
app.add_typer(saga.app, name="saga")
app.add_typer(trust.app, name="trust")
saga.app.command("quarantine")(halt.quarantine)
saga.app.command("release")(halt.release)
saga.app.command("rollback")(rollback.rollback)
app.command("verify")(verify.verify)
app.command("certify")(certify.certify_command)
app.command("witness")(witness.witness)
app.command("worker")(worker.worker)
