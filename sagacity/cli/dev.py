"""``sagacity dev``: run the embedded dev stack until Ctrl-C.

Starts a file-backed Temporal dev server and the embedded Postgres under the data folder (whatever
``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` do not already point at), sets up the journal as
its owner (migrations, the append-only ``sagacity_app`` role) and the anchors (a signing key and a
checkpoint folder under ``<data_dir>/anchors``, created once) and the payload codec's keys
(``<data_dir>/codec-keys``, created once), prints the ``export`` lines another
terminal needs (and keeps them in ``<data_dir>/dev.env`` while it runs, to ``source``), and
stops both cleanly on Ctrl-C or SIGTERM. Meanwhile it supervises the servers it started
(:mod:`sagacity.devsupervise`): one that dies is restarted with its data, a few times a minute at
most; past that the command exits 1 naming the server.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
from pathlib import Path
from typing import Annotated

import typer

from sagacity.cli._exit import hard_exit
from sagacity.devkeys import DevSetup
from sagacity.devstack import DevStack, Endpoints, tcp_port_free
from sagacity.devsupervise import DEFAULT_RESTARTS, RESTART_WINDOW_S, supervise
from sagacity.errors import DevStackError, SagacityError, SettingsError
from sagacity.evidence.trust import fingerprint as full_fingerprint
from sagacity.settings import dev_env_file, load_settings

__all__ = ["dev"]

#: Temporal's usual frontend port: taken when free, so the exports stay the same across runs.
DEFAULT_TEMPORAL_PORT = 7233


def _exports(endpoints: Endpoints, setup: DevSetup | None) -> list[str]:
    lines = []
    if setup is not None:
        for name, value in (
            ("SAGACITY_DATABASE_URL", setup.database_url),
            ("SAGACITY_OWNER_DATABASE_URL", setup.owner_database_url),
            ("SAGACITY_SIGNING_KEY", setup.signing_key),
            ("SAGACITY_TRUST_FILE", setup.trust_file),
            ("SAGACITY_CHECKPOINT_DIR", setup.checkpoint_dir),
            ("SAGACITY_REDACT_KEY", setup.fingerprint_key),
            ("SAGACITY_KEYRING", setup.keyring),
            ("SAGACITY_APPROVER_KEY", setup.approver_key),
            ("SAGACITY_SERVICE_KEY", setup.service_key),
            ("SAGACITY_CODEC_KEYS_FILE", setup.codec_keys_file),
            ("SAGACITY_APPROVAL_TOKENS_FILE", setup.console_token),
        ):
            if value is not None:
                lines.append(f"export {name}={shlex.quote(str(value))}")
    if endpoints.temporal_address:
        lines.append(f"export TEMPORAL_ADDRESS={shlex.quote(endpoints.temporal_address)}")
    if endpoints.temporal_namespace != "default":
        lines.append(f"export TEMPORAL_NAMESPACE={shlex.quote(endpoints.temporal_namespace)}")
    return lines


def _say_anchors(setup: DevSetup) -> None:
    if setup.key_created:
        typer.echo(
            f"anchors: created signing key {setup.signing_key} (public half {setup.public_key})",
            err=True,
        )
    typer.echo(
        f"anchors: checkpoints in {setup.checkpoint_dir}, signed by key {setup.key_id}\n"
        f"         fingerprint {setup.fingerprint}: publish it where auditors can compare it",
        err=True,
    )
    if setup.trust_file is not None:
        typer.echo(
            f"trust: verifiers pin that key in {setup.trust_file}, apart from the folders the "
            "workers write ; an auditor checks with "
            f"`--fingerprint {setup.fingerprint}` or a copy of the file",
            err=True,
        )
    if setup.witness is not None:
        typer.echo(
            f"witness: every tree head is cosigned by {setup.witness.name} at {setup.witness.url} "
            f"(its own key, fingerprint {full_fingerprint(setup.witness.key)}, and state in "
            "<data dir>/witness), pinned in the trust file with a quorum of 1",
            err=True,
        )
    if setup.trust_problem is not None:
        typer.echo(f"warning: {setup.trust_problem}", err=True)
    if setup.keyring is not None:
        who = f"; your key {setup.approver_key} signs as {setup.approver!r}"
        who = who if setup.approver else ""
        typer.echo(f"decisions: must be signed by a key in {setup.keyring}{who}", err=True)
    if setup.console_token is not None:
        typer.echo(
            "console: run `sagacity approvals serve`, open http://127.0.0.1:8080/console/ and sign "
            f"in with the token before '=' in {setup.console_token}",
            err=True,
        )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (it names the stack's keys); a
    symlink planted there is refused, not followed."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise DevStackError(f"cannot write the exports to {path}: {exc}") from None


async def _run(stack: DevStack, restarts: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        endpoints = await stack.start()
        if not (stack.runs_postgres or stack.runs_temporal):
            typer.echo("SAGACITY_DATABASE_URL and TEMPORAL_ADDRESS are both set: nothing to start.")
            return
        for service, seconds in stack.startup_seconds.items():
            typer.echo(f"{service} ready in {seconds:.1f}s", err=True)
        setup = None
        if endpoints.database_url:
            setup = await stack.prepare()
            if setup.owner_database_url is not None:
                typer.echo(
                    "journal: migrated as the tables' owner; workers and commands log in as "
                    "sagacity_app (INSERT and SELECT only)",
                    err=True,
                )
            _say_anchors(setup)
        exports = _exports(endpoints, setup)
        env_file = dev_env_file(stack.data_dir)
        _write_private(env_file, "".join(f"{line}\n" for line in exports))
        typer.echo(
            f"Sagacity dev stack is running. In another terminal, `source {env_file}`, or:\n"
        )
        for line in exports:
            typer.echo(f"  {line}")
        logs = [p for p in (stack.temporal_log, stack.postgres_log) if p is not None]
        typer.echo(f"\nLogs: {', '.join(str(p) for p in logs)}")
        typer.echo("Press Ctrl-C to stop.")
        await _until_stopped(stack, stop, restarts)
        typer.echo("\nstopping...", err=True)
    finally:
        # gone with the stack: a stale file would send the next terminal to a dead server
        dev_env_file(stack.data_dir).unlink(missing_ok=True)
        await stack.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _until_stopped(stack: DevStack, stop: asyncio.Event, restarts: int) -> None:
    """Supervise the stack's servers until Ctrl-C; raise when one dies past its restarts."""
    watch = asyncio.create_task(supervise(stack, _say_restart, restarts=restarts))
    stopped = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait({watch, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if watch in done:
            watch.result()  # the DevStackError that names the server
    finally:
        for task in (watch, stopped):
            task.cancel()
        await asyncio.gather(watch, stopped, return_exceptions=True)


def _say_restart(line: str) -> None:
    typer.echo(line, err=True)


@hard_exit
def dev(
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            help="Temporal frontend port (default: 7233 when free, else any; 0: any free port).",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Where the stack keeps its data (SAGACITY_DATA_DIR)."),
    ] = None,
    restarts: Annotated[
        int,
        typer.Option(
            "--restarts",
            min=0,
            help=f"Restart a server that dies up to this many times within "
            f"{RESTART_WINDOW_S:.0f}s, then exit 1 naming it (0: exit at once).",
        ),
    ] = DEFAULT_RESTARTS,
) -> None:
    """Run a real Temporal dev server and Postgres locally until Ctrl-C."""
    try:
        settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    except SettingsError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if port is None and tcp_port_free(DEFAULT_TEMPORAL_PORT):
        port = DEFAULT_TEMPORAL_PORT
    elif port == 0:
        port = None
    stack = DevStack(settings, temporal_port=port)
    try:
        asyncio.run(_run(stack, restarts))
    except (DevStackError, SagacityError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
