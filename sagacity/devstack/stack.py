"""The dev stack as one object: start what the settings leave unset, prepare it, restart its parts.

:class:`DevStack` composes the embedded Postgres (:mod:`sagacity.devstack.postgres`) and the
Temporal dev server (:mod:`sagacity.devstack.temporal`), starting each only when its setting
(``SAGACITY_DATABASE_URL``, ``TEMPORAL_ADDRESS``) is unset, and hands out their
:class:`Endpoints`. :meth:`DevStack.prepare` is the owner's set-up a new user gets: it migrates
the journal as the tables' owner, creates the ``sagacity_app`` role (journal INSERT and SELECT
only) and returns a URL that logs in as it, with the key material of
:mod:`sagacity.devstack.trust` and the dev witness that cosigns the journal's log.

The restart helpers (:meth:`DevStack.restart_postgres`, :meth:`DevStack.restart_temporal` and
their stop/start halves) exist for chaos tests and for :mod:`sagacity.devsupervise`, which
restarts a server that dies under ``sagacity dev``. A Postgres restart is seen by every process that
shares the cluster, so a chaos test should use a stack with a ``data_dir`` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

from sagacity.devkeys import DevSetup
from sagacity.devstack.postgres import DEV_DATABASE, EmbeddedPostgres, PostgresStopMode
from sagacity.devstack.temporal import TemporalDevServer
from sagacity.devstack.trust import dev_setup
from sagacity.devwitness import DevWitness
from sagacity.errors import DevStackError, StoreUnavailable
from sagacity.store.databases import ensure_database
from sagacity.store.migrate import provision
from sagacity.store.roles import journal_rights

if TYPE_CHECKING:
    from sagacity.settings import Settings

__all__ = ["DevStack", "Endpoints"]


@dataclass(frozen=True)
class Endpoints:
    """Where the running (or configured) services are."""

    database_url: str
    temporal_address: str
    temporal_namespace: str


class DevStack:
    """Start what the settings leave unset: embedded Postgres and/or a Temporal dev server.

    ``temporal_db``: ``None`` keeps Temporal's state in ``<data_dir>/temporal.db`` (survives
    restarts), ``"memory"`` keeps it in memory (faster; for tests), a path puts the file there.
    ``temporal_port``: the frontend port; ``None`` picks a free one. ``postgres=False`` /
    ``temporal=False`` start nothing for that service even when it is not configured (its
    endpoint is then the configured value or ``""``).

    Use as ``async with DevStack(settings) as endpoints: ...`` or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        temporal_db: Path | Literal["memory"] | None = None,
        postgres: bool = True,
        temporal: bool = True,
        temporal_port: int | None = None,
        start_timeout: float = 60.0,
        witness: bool = True,
    ) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.expanduser().resolve()
        self.start_timeout = start_timeout
        self._endpoints: Endpoints | None = None
        self.startup_seconds: dict[str, float] = {}
        #: whether :meth:`prepare` runs the dev witness (when it writes the dev trust file)
        self._wants_witness = witness
        self.witness: DevWitness | None = None

        self._postgres: EmbeddedPostgres | None = None
        if postgres and not settings.database_url:
            self._postgres = EmbeddedPostgres(self.data_dir / "postgres")

        self._temporal: TemporalDevServer | None = None
        if temporal and not settings.temporal_address:
            self._temporal = TemporalDevServer.under(
                self.data_dir,
                temporal_db=temporal_db,
                namespace=settings.temporal_namespace,
                port=temporal_port,
            )

    # -- what is running ---------------------------------------------------------------------

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise DevStackError("the dev stack is not started")
        return self._endpoints

    @property
    def runs_postgres(self) -> bool:
        """True when this stack starts the embedded Postgres (``SAGACITY_DATABASE_URL`` unset)."""
        return self._postgres is not None

    @property
    def runs_temporal(self) -> bool:
        """True when this stack starts a Temporal dev server (``TEMPORAL_ADDRESS`` unset)."""
        return self._temporal is not None

    @property
    def temporal_state(self) -> Path | None:
        """The Temporal dev server's state file (None: in memory, or no server of this stack)."""
        return self._temporal.db_file if self._temporal else None

    def temporal_exit_code(self) -> int | None:
        """The code this stack's Temporal server exited with on its own; None while it runs."""
        return self._temporal.exit_code() if self._temporal and self._endpoints else None

    def postgres_down(self) -> bool:
        """True when this stack's embedded Postgres is gone (its postmaster crashed or was
        killed) while the stack runs."""
        return bool(self._postgres and self._endpoints and self._postgres.down())

    @property
    def postgres_log(self) -> Path | None:
        return self._postgres.log_path if self._postgres else None

    @property
    def temporal_log(self) -> Path | None:
        return self._temporal.log_path if self._temporal else None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Endpoints:
        """Start what is needed (idempotent) and return the endpoints."""
        if self._endpoints is not None:
            return self._endpoints
        try:
            database_url = self.settings.database_url or ""
            if self._postgres is not None:
                began = time.monotonic()
                server_url = await asyncio.to_thread(self._postgres.start)
                database_url = await ensure_database(server_url, DEV_DATABASE)
                self.startup_seconds["postgres"] = time.monotonic() - began

            temporal_address = self.settings.temporal_address or ""
            if self._temporal is not None:
                began = time.monotonic()
                await self._temporal.start(self.start_timeout)
                temporal_address = self._temporal.address
                self.startup_seconds["temporal"] = time.monotonic() - began
        except BaseException:
            await self.stop()
            raise
        self._endpoints = Endpoints(
            database_url=database_url,
            temporal_address=temporal_address,
            temporal_namespace=self.settings.temporal_namespace,
        )
        return self._endpoints

    async def stop(self) -> None:
        """Stop what this stack started (the witness, Temporal, then Postgres). Safe to call
        twice."""
        self._endpoints = None
        if self.witness is not None:
            self.witness.stop()
        if self._temporal is not None:
            self._temporal.close()
        if self._postgres is not None:
            await asyncio.to_thread(self._postgres.stop)

    async def prepare(self) -> DevSetup:
        """The owner's set-up of the started stack's journal, and the anchors (idempotent).

        The owner is ``SAGACITY_OWNER_DATABASE_URL``, else the stack's database: the embedded
        one, or ``SAGACITY_DATABASE_URL`` as given (unless that already logs in as an
        append-only role: then nothing is set up). It migrates and grants ``sagacity_app``;
        the app URL is ``SAGACITY_DATABASE_URL`` when both are set, else the owner's URL
        logging in as ``sagacity_app``. Anchor and codec key settings given are kept; unset,
        the dev anchors and codec keys under ``data_dir`` are used (created on first use).
        """
        settings = self.settings
        given = settings.owner_database_url or self.endpoints.database_url
        if not given:
            raise DevStackError("no database to prepare: this stack runs no Postgres")
        owner: str | None = given
        if settings.database_url and not settings.owner_database_url:
            # never migrate through an append-only login: it is already the app's, set up
            with contextlib.suppress(StoreUnavailable):  # no journal there yet: set it up
                if (await journal_rights(given)).append_only:
                    owner = None
        app = given if owner is None else await provision(owner)
        if settings.owner_database_url and settings.database_url:
            app = settings.database_url
        return dev_setup(settings, self.data_dir, owner=owner, app=app, witness=self._witness)

    def _witness(self) -> DevWitness | None:
        """The dev witness, started on first use; None when this stack runs none."""
        if not self._wants_witness:
            return None
        if self.witness is None:
            self.witness = DevWitness(self.data_dir / "witness")
            self.witness.start()
        return self.witness

    async def __aenter__(self) -> Endpoints:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- chaos helpers -----------------------------------------------------------------------

    async def stop_postgres(self, *, mode: PostgresStopMode = "fast") -> None:
        """Stop the embedded Postgres now (``immediate`` = like a crash: no checkpoint)."""
        await asyncio.to_thread(self._require_postgres().pg_ctl_stop, mode)

    async def start_postgres(self) -> None:
        """Start the embedded Postgres again: same folder, same socket, same URL."""
        await asyncio.to_thread(self._require_postgres().pg_ctl_start)

    async def restart_postgres(
        self, *, mode: PostgresStopMode = "fast", downtime: float = 0.0
    ) -> None:
        """Stop the embedded Postgres, stay down for ``downtime`` seconds, start it again."""
        await self.stop_postgres(mode=mode)
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start_postgres()

    async def stop_temporal(self, *, kill: bool = False) -> None:
        """Stop the Temporal dev server (``kill=True``: SIGKILL, like a crash); keeps its port."""
        self._require_temporal().terminate(kill=kill)

    async def start_temporal(self) -> None:
        """Start the Temporal dev server again on the same port and the same state file."""
        server = self._require_temporal()
        server.spawn()
        await server.wait_ready(self.start_timeout)

    async def restart_temporal(self, *, kill: bool = False, downtime: float = 0.0) -> None:
        """Stop the Temporal dev server, stay down for ``downtime`` seconds, start it again.

        With an in-memory server (``temporal_db="memory"``) everything it held is lost; chaos
        tests that expect workflows to survive want the file-backed default.
        """
        await self.stop_temporal(kill=kill)
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start_temporal()

    def _require_postgres(self) -> EmbeddedPostgres:
        if self._postgres is None or self._endpoints is None:
            raise DevStackError("this stack did not start Postgres (SAGACITY_DATABASE_URL is set?)")
        return self._postgres

    def _require_temporal(self) -> TemporalDevServer:
        if self._temporal is None or self._endpoints is None:
            raise DevStackError("this stack did not start Temporal (TEMPORAL_ADDRESS is set?)")
        return self._temporal
