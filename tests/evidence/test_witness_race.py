"""A live log is never called rolled back: a verifier that meets a sequencer pass between the
witness cosigning its head and the pass publishing it, on real Postgres and a real HTTP witness.

A pass has its new head cosigned, then publishes it: in between the witness holds a head the
checkpoint store lacks. The witness here cosigns at once but its answer is held back until the
test lets it go, so `sagacity verify` and `sagacity log verify` run in exactly that window. A
store really put back still fails `sagacity verify`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity.evidence.keys import load_private_key
from sagacity.evidence.tlog import HeadLog, Sequencer
from sagacity.evidence.trust import TrustedKey, TrustedWitness, TrustRoots, write_trust
from sagacity.evidence.witness import Witness
from sagacity.evidence.witness_http import create_app
from sagacity.store import open_pool
from sagacity.store.tlog import TlogStore
from tests.evidence.test_tlog import LogDb, write_sagas
from tests.evidence.test_witness import (
    WITNESS,
    cli,
    env_of,
    log_key,
    origin_of,
    roll_back,
    snapshot,
)
from tests.serving import serve

T = TypeVar("T")


class HeldAnswers:
    """The witness's app, but the answer to an ``add-checkpoint`` waits for :attr:`release`
    once the witness has stored and cosigned the head (:attr:`cosigned` is set then)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.cosigned = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/add-checkpoint":
            await self.app(scope, receive, send)
            return
        answer: list[Message] = []

        async def keep(message: Message) -> None:
            answer.append(message)

        await self.app(scope, receive, keep)
        self.cosigned.set()
        await self.release.wait()
        for message in answer:
            await send(message)


async def first_of(awaited: Awaitable[object], running: asyncio.Task[T]) -> None:
    """Wait for ``awaited``; ``running`` ending first (failing) ends the wait with its error."""
    waiting = asyncio.ensure_future(awaited)
    await asyncio.wait([waiting, running], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        running.result()
        raise AssertionError(f"{running} ended first")


async def lock_waited_for(db: LogDb) -> bool:
    """Whether a session waits for an advisory lock (the sequencer's) in the log's database."""
    async with await psycopg.AsyncConnection.connect(db.owner_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_catalog.pg_database"
            " WHERE datname = current_database())"
        )
        row = await cur.fetchone()
    return row is not None and row[0] > 0


async def test_a_head_cosigned_but_not_yet_published_is_no_rollback(
    log_db: LogDb, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    witness = Witness(tmp_path / "w", WITNESS, Ed25519PrivateKey.generate(), [log_key(log_db)])
    held = HeldAnswers(create_app(witness))
    async with serve(held) as url:
        # quorum 0: the verdict does not hang on the witness answering the pass in time
        trust = TrustRoots(
            (TrustedKey("log", log_key(log_db).public),),
            (TrustedWitness(WITNESS, witness.key.public, url),),
            0,
        )
        write_trust(tmp_path / "trust.json", trust)
        # the same typer app in this process; SAGACITY_SOFT_EXIT lets the runner catch the exit
        env = {**env_of(log_db, tmp_path / "trust.json"), "SAGACITY_SOFT_EXIT": "1"}
        key = load_private_key(log_db.signing_key)
        heads = HeadLog(log_db.checkpoints, key.public_key())
        pool = await open_pool(log_db.app_url, max_size=4)
        try:
            sequencer = Sequencer(
                TlogStore(pool), log_db.checkpoints, key, witnesses=trust.witnesses
            )
            await write_sagas(log_db, [f"a-{tag}", f"b-{tag}"])
            held.release.set()
            assert (await sequencer.integrate()).size == 8
            snapshot(log_db, tmp_path / "snap")
            for command in (["verify", "--all"], ["log", "verify"]):
                before = heads.latest().head.size  # type: ignore[union-attr]
                await write_sagas(log_db, [f"{command[0]}-{tag}"], calls=3)
                held.cosigned.clear()
                held.release.clear()
                passing = asyncio.create_task(sequencer.integrate())
                await first_of(held.cosigned.wait(), passing)
                # the window: the witness holds the new head, the checkpoint store the old one
                assert witness.state(origin_of(log_db)).size == before + 6  # type: ignore[union-attr]
                assert heads.latest().head.size == before  # type: ignore[union-attr]
                checking = asyncio.create_task(asyncio.to_thread(cli, *command, env=env))
                # it has read both heads once it waits for the pass to end (or it has its verdict)
                while not checking.done() and not await lock_waited_for(log_db):
                    await asyncio.sleep(0.02)
                held.release.set()
                assert (await passing).size == before + 6
                code, out, err = await checking
                assert "rolled back" not in out + err, (command, out, err)
                assert code == 0, (command, out, err)
            # a store put back as it was after the first pass stays behind however often it is
            # read: that is still a rollback
            roll_back(log_db, tmp_path / "snap")
            code, out, _ = await asyncio.to_thread(cli, "verify", "--all", env=env)
            assert (
                code == 1
                and "the latest published head is 8: the checkpoint store was rolled back" in out
            ), out
        finally:
            held.release.set()
            await pool.close()
