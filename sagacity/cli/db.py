"""``sagacity db``: bring the journal schema up to date and set up the application role.

Both are the tables' owner's steps: they connect with ``SAGACITY_OWNER_DATABASE_URL`` (falling
back to ``SAGACITY_DATABASE_URL``), while workers and every other command use the app role's
``SAGACITY_DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from sagacity.cli._common import run_or_exit, settings_or_exit
from sagacity.devstack import running_dev_database
from sagacity.store.migrate import APP_ROLE, apply_grants, migrate

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
        help="Postgres URL of the journal (default: SAGACITY_DATABASE_URL, else the running dev "
        "stack's).",
        show_default=False,
    ),
]
OwnerUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Postgres URL of the tables' owner "
        "(default: SAGACITY_OWNER_DATABASE_URL, else SAGACITY_DATABASE_URL).",
        show_default=False,
    ),
]


def journal_url_or_exit(given: str | None) -> str:
    """The journal URL a command uses, or exit 2 saying how to give one.

    ``given``, else ``SAGACITY_DATABASE_URL``, else the running dev stack's embedded Postgres
    (as ``sagacity_app``), found under the data folder as every dev-stack command finds it.
    """
    settings = settings_or_exit()
    url = given or settings.database_url or running_dev_database(settings.data_dir)
    if not url:
        typer.echo(
            "error: no database to use: set SAGACITY_DATABASE_URL, pass --database-url, "
            f"or start the dev stack (`sagacity dev`; none runs under {settings.data_dir})",
            err=True,
        )
        raise typer.Exit(2)
    return url


def _owner_url(given: str | None) -> str:
    """The tables' owner's URL, or exit 2 saying how to give one."""
    settings = settings_or_exit()
    url = given or settings.owner_database_url or settings.database_url
    if not url:
        typer.echo(
            "error: no database to use: set SAGACITY_OWNER_DATABASE_URL (the tables' owner) "
            "or pass --database-url",
            err=True,
        )
        raise typer.Exit(2)
    return url


@app.command("migrate")
def migrate_command(
    database_url: OwnerUrl = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"applied": [...]} instead of text.')
    ] = False,
) -> None:
    """Apply the schema migrations the database lacks (safe to run again, or concurrently)."""
    applied = run_or_exit(migrate(_owner_url(database_url)))
    if as_json:
        typer.echo(json.dumps({"applied": applied}))
    elif applied:
        for version in applied:
            typer.echo(f"applied {version}")
    else:
        typer.echo("schema up to date")


@app.command("grants")
def grants_command(
    database_url: OwnerUrl = None,
    role: Annotated[
        str, typer.Option("--role", help="Role the application connects as.")
    ] = APP_ROLE,
    password_env: Annotated[
        str | None,
        typer.Option(
            "--password-env",
            help="Environment variable holding the role's password (never on the command line).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Create the application role if missing; journal INSERT/SELECT only, no UPDATE/DELETE.

    Run as the tables' owner after `migrate`. The role is created with LOGIN; `--password-env`
    sets its password, else give it one (or another authentication method) yourself. It also
    gets a schema of its own, named after it, for an app's own tables.
    """
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            typer.echo(f"error: --password-env {password_env}: that variable is unset", err=True)
            raise typer.Exit(2)
    run_or_exit(apply_grants(_owner_url(database_url), role=role, password=password))
    typer.echo(f"role {role}: journal append-only (INSERT, SELECT); approval requests read-write")
