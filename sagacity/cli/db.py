"""``sagacity db``: bring the journal schema up to date and set up the application role."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sagacity.cli._common import run_or_exit
from sagacity.errors import SagacityError
from sagacity.settings import load_settings
from sagacity.store.migrate import apply_grants, migrate

__all__ = ["app"]


app = typer.Typer(
    name="db",
    help="Journal database: schema migrations and the application role.",
    no_args_is_help=True,
)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Postgres URL of the journal (default: SAGACITY_DATABASE_URL).",
        show_default=False,
    ),
]


def _database_url(given: str | None) -> str:
    """The URL to use, or exit 2 saying how to give one."""
    try:
        url = given or load_settings().database_url
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not url:
        typer.echo(
            "error: no database to use: set SAGACITY_DATABASE_URL or pass --database-url",
            err=True,
        )
        raise typer.Exit(2)
    return url


@app.command("migrate")
def migrate_command(
    database_url: DatabaseUrl = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"applied": [...]} instead of text.')
    ] = False,
) -> None:
    """Apply the schema migrations the database lacks (safe to run again, or concurrently)."""
    applied = run_or_exit(migrate(_database_url(database_url)))
    if as_json:
        typer.echo(json.dumps({"applied": applied}))
    elif applied:
        for version in applied:
            typer.echo(f"applied {version}")
    else:
        typer.echo("schema up to date")


@app.command("grants")
def grants_command(
    database_url: DatabaseUrl = None,
    role: Annotated[
        str, typer.Option("--role", help="Role the application connects as.")
    ] = "sagacity_app",
) -> None:
    """Create the application role if missing; journal INSERT/SELECT only, no UPDATE/DELETE.

    Run as the tables' owner after `migrate`. The role is created with LOGIN and no password:
    give it one (or another authentication method) yourself.
    """
    run_or_exit(apply_grants(_database_url(database_url), role=role))
    typer.echo(f"role {role}: journal append-only (INSERT, SELECT); approval requests read-write")
