"""Witnessed tree heads on real Postgres and a real HTTP witness: cosigned, missed and made up,
refused when rolled back or forked, and a rolled-back checkpoint store named by `log verify`.

The witness runs as ``sagacity witness`` in its own process where a restart matters, else in the
test's event loop on a free port; the sequencer is the real one, on a database of the test's own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner

from sagacity.cli.main import app
from sagacity.evidence.keys import load_private_key
from sagacity.evidence.merkle import Frontier, consistency_ranges, leaf_hash, range_hash
from sagacity.evidence.note import (
    COSIGNATURE_V1,
    NoteKey,
    NoteSigner,
    TreeHead,
    open_note,
    sign_note,
)
from sagacity.evidence.tlog import HeadLog, Sequencer, run_sequencer
from sagacity.evidence.trust import TrustedKey, TrustedWitness, TrustRoots, write_trust
from sagacity.evidence.witness import SIZE_TYPE, AddCheckpoint, Witness
from sagacity.evidence.witness_check import witness_findings
from sagacity.evidence.witness_client import Witnessing, log_witnessing
from sagacity.evidence.witness_http import create_app
from sagacity.store import open_pool
from sagacity.store.tlog import TlogStore
from tests.evidence.test_tlog import LogDb, history, owner_sql, write_sagas
from tests.serving import serve

WITNESS = "witness.test/w1"


def origin_of(db: LogDb) -> str:
    return f"sagacity.local/journal/{conninfo_to_dict(db.owner_url)['dbname']}"


def log_key(db: LogDb) -> NoteKey:
    return NoteKey(origin_of(db), load_private_key(db.signing_key).public_key())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def trust_file(path: Path, db: LogDb, witness: NoteKey, url: str | None, quorum: int) -> Path:
    roots = TrustRoots(
        (TrustedKey("log", log_key(db).public),),
        (TrustedWitness(witness.name, witness.public, url),),
        quorum,
    )
    write_trust(path, roots)
    return path


@contextlib.contextmanager
def witness_process(folder: Path, port: int, db: LogDb) -> Iterator[NoteKey]:
    """``sagacity witness`` serving the log of ``db`` on ``port``; its key."""
    command = [
        str(Path(sys.executable).parent / "sagacity"), "witness", "--folder", str(folder),
        "--listen", f"127.0.0.1:{port}", "--log", log_key(db).vkey(), "--name", WITNESS,
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith(f"witness key: {WITNESS}+"), first
        key = NoteKey.parse(first.removeprefix("witness key: ").strip())
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}/checkpoint", params={"origin": "x"})
                break
            assert process.poll() is None, process.stdout.read()
            time.sleep(0.05)
        yield key
    finally:
        process.send_signal(signal.SIGTERM)
        stopped = process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
        assert stopped == 0  # a clean stop on SIGTERM


def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def env_of(db: LogDb, trust: Path) -> dict[str, str]:
    return {
        "SAGACITY_DATABASE_URL": db.app_url,
        "SAGACITY_CHECKPOINT_DIR": str(db.checkpoints),
        "SAGACITY_SIGNING_KEY": str(db.signing_key),
        "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(db.public_key),
        "SAGACITY_TRUST_FILE": str(trust),
    }


def test_heads_are_cosigned_a_missed_head_is_cosigned_later_and_state_survives_a_restart(
    log_db: LogDb, tmp_path: Path
) -> None:
    folder, port = tmp_path / "witness", free_port()
    tag = uuid.uuid4().hex[:6]
    asyncio.run(write_sagas(log_db, [f"a-{tag}", f"b-{tag}"]))
    with witness_process(folder, port, log_db) as key:
        trust = trust_file(tmp_path / "trust.json", log_db, key, f"http://127.0.0.1:{port}", 1)
        env = env_of(log_db, trust)
        code, out, err = cli("log", "integrate", env=env)
        assert (code, out) == (
            0,
            f"8 rows appended; published tree head 8, cosigned by {WITNESS}\n",
        ), err
        published = (log_db.checkpoints / "tlog" / "checkpoint").read_text()
        opened = open_note(published, log_key(log_db), [key])
        assert opened.head.size == 8 and WITNESS in opened.witnessed
        # the witness's own record is that very head, with its cosignature
        held = httpx.get(
            f"http://127.0.0.1:{port}/checkpoint", params={"origin": origin_of(log_db)}
        )
        assert held.status_code == 200
        assert open_note(held.text, log_key(log_db), [key]).head == opened.head
        code, out, _ = cli("log", "verify", env=env)
        assert code == 0 and out.endswith(
            "8 leaves, 1 tree heads (latest 8), 0 rows pending: all verified\n"
        ), out
        bundle = tmp_path / "proof"
        assert cli("prove", f"a-{tag}", "--out", str(bundle), env=env)[0] == 0

    # the witness is down: the log goes on, log-signed only, and says so
    asyncio.run(write_sagas(log_db, [f"c-{tag}"], calls=1))
    code, out, err = cli("log", "integrate", env=env)
    assert (code, out) == (0, "2 rows appended; published tree head 10, cosigned by no witness\n")
    assert f"warning: tree head 10 not cosigned by witness {WITNESS} yet" in err
    code, out, _ = cli("log", "verify", env=env)
    assert code == 1
    assert "FAILED  tree head 10 (published " in out
    assert (
        f"has 0 of the 1 witness cosignatures the trust file requires (missing: {WITNESS})" in out
    )
    assert (
        f"WARNING cannot check the published heads against it: witness {WITNESS} unreachable" in out
    )
    unwitnessed = tmp_path / "proof10"
    assert cli("prove", f"c-{tag}", "--out", str(unwitnessed), env=env)[0] == 0
    public = ("--public-key", str(log_db.public_key))
    code, out, _ = cli("prove", "--check", str(unwitnessed), *public, env=env)
    assert code == 1 and "0 of the 1 witness cosignatures required" in out
    code, out, _ = cli("prove", "--check", str(bundle), *public, env=env)
    assert code == 0 and out.startswith("VERIFIED"), out

    # restarted, the witness still holds head 8: the next pass proves 10 from it, and
    # publishes head 10 again with the cosignature (a second line of the same size and root)
    with witness_process(folder, port, log_db) as again:
        assert again == key
        held = httpx.get(
            f"http://127.0.0.1:{port}/checkpoint", params={"origin": origin_of(log_db)}
        )
        assert open_note(held.text, log_key(log_db), [key]).head.size == 8
        code, out, err = cli("log", "integrate", env=env)
        assert (code, out, err) == (
            0,
            f"0 rows appended; published tree head 10, cosigned by {WITNESS}\n",
            "",
        )
        lines = history(log_db)
        assert [
            TreeHead.parse(str(line["note"]).split("\n\n")[0] + "\n").size for line in lines
        ] == [8, 10, 10]
        assert lines[-1]["consistency"] == []
        assert open_note(str(lines[-1]["note"]), log_key(log_db), [key]).head.size == 10
        code, out, _ = cli("log", "verify", env=env)
        assert code == 0 and "3 tree heads (latest 10), 0 rows pending: all verified" in out, out
        # nothing more to cosign: nothing more published
        assert cli("log", "integrate", env=env)[0] == 0 and len(history(log_db)) == 3


@contextlib.asynccontextmanager
async def served(folder: Path, db: LogDb) -> AsyncIterator[tuple[str, Witness]]:
    """A witness of ``db``'s log served in this event loop on a free port."""
    witness = Witness(folder, WITNESS, Ed25519PrivateKey.generate(), [log_key(db)])
    async with serve(create_app(witness)) as url:
        yield url, witness


class Log:
    """A log of our own making, to send the witness whatever heads a test needs."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.key = Ed25519PrivateKey.generate()
        self.frontier = Frontier()
        self.nodes: dict[tuple[int, int], bytes] = {}

    def grow(self, n: int, salt: bytes = b"") -> TreeHead:
        for _ in range(n):
            leaf = leaf_hash(salt + b"%d" % self.frontier.size)
            self.nodes.update(self.frontier.append(leaf))
        return TreeHead(self.origin, self.frontier.size, self.frontier.root())

    def note(self, head: TreeHead) -> str:
        return sign_note(head, [NoteSigner(self.origin, self.key)])

    def proof(self, old: int, new: int) -> list[bytes]:
        return [range_hash(a, b, self.nodes) for a, b in consistency_ranges(old, new)]

    @property
    def vkey(self) -> NoteKey:
        return NoteKey(self.origin, self.key.public_key())


async def test_the_witness_refuses_rollbacks_forks_bad_proofs_and_bad_input(tmp_path: Path) -> None:
    log = Log("test.example/log")
    folder = tmp_path / "w"
    witness = Witness(folder, WITNESS, Ed25519PrivateKey.generate(), [log.vkey])
    async with serve(create_app(witness)) as url, httpx.AsyncClient(base_url=url) as http:

        async def add(old: int, proof: list[bytes], note: str) -> httpx.Response:
            return await http.post(
                "/add-checkpoint", content=AddCheckpoint(old, proof, note).body()
            )

        async def held() -> str:
            response = await http.get("/checkpoint", params={"origin": log.origin})
            return response.text

        assert (await http.get("/checkpoint", params={"origin": log.origin})).status_code == 404
        five = log.grow(5)
        ok = await add(0, [], log.note(five))
        assert ok.status_code == 200 and ok.text.startswith(f"\u2014 {WITNESS} ")
        eight = log.grow(3)
        assert (await add(5, log.proof(5, 8), log.note(eight))).status_code == 200
        state = await held()
        assert state.startswith(f"{log.origin}\n8\n")
        assert state.split("\n\n")[1].splitlines()[-1].startswith(f"\u2014 {WITNESS} ")

        # the log believes the witness holds 5: it holds 8, and says so
        stale = await add(5, log.proof(5, 8), log.note(eight))
        assert (stale.status_code, stale.headers["content-type"], stale.text) == (
            409,
            SIZE_TYPE,
            "8\n",
        )
        # a rollback: the head of size 5 again, whatever old size the log claims
        assert (await add(8, [], log.note(five))).status_code == 400
        assert (await add(5, [], log.note(five))).status_code == 409
        # a fork: another head of size 8
        fork = Log(log.origin)
        fork.key = log.key
        other8 = fork.grow(8, salt=b"fork")
        forked = await add(8, [], fork.note(other8))
        assert forked.status_code == 409 and "fork" in forked.text
        # a fork that grows: its proof from 8 cannot verify against the root the witness holds
        other12 = fork.grow(4, salt=b"fork")
        assert (await add(8, fork.proof(8, 12), fork.note(other12))).status_code == 422
        # both kept, signed by the log: proof it signed heads inconsistent with one it signed
        kept = [AddCheckpoint.parse(k.read_bytes()) for k in sorted((folder / "refused").iterdir())]
        assert [open_note(k.note, log.vkey).head for k in kept] == [other8, other12]
        # unknown log; a note the log's key did not sign; a proof of the wrong size
        stranger = Log("test.example/other")
        assert (await add(0, [], stranger.note(stranger.grow(1)))).status_code == 404
        impostor = Log(log.origin)
        assert (await add(8, [], impostor.note(impostor.grow(9)))).status_code == 403
        twelve = log.grow(4)
        assert (await add(8, log.proof(5, 12), log.note(twelve))).status_code == 422
        assert (await add(0, [], log.note(twelve))).status_code == 409
        assert await held() == state  # none of it changed what the witness holds

        note = log.note(twelve)
        bad_inputs: list[bytes] = [
            b"",
            b"junk",
            b"\xff\xfe old 8\n\n" + note.encode(),
            b"old 8\x00\n\n" + note.encode(),
            b"old 08\n\n" + note.encode(),
            b"old -1\n\n" + note.encode(),
            b"old 8\n" + b"AAAA\n" * 3 + b"\n" + note.encode(),
            b"old 8\n" + (base64.b64encode(bytes(32)) + b"\n") * 64 + b"\n" + note.encode(),
            b"old 8\n\n" + note.encode().replace(b"\n\n", b"\n"),
            b"old 8\n\n" + b"[" * 5000 + b"\n\n",
            b"old 99999999999999999999\n\n" + note.encode(),
        ]
        for body in bad_inputs:
            response = await http.post("/add-checkpoint", content=body)
            assert response.status_code == 400, (body[:40], response.status_code, response.text)
        huge = await http.post("/add-checkpoint", content=b"old 8\n" + b"A" * (1 << 20))
        assert huge.status_code == 413
        for params in ({}, {"origin": ""}, {"origin": ["a", "b"]}, {"origin": "x" * 5000}):
            assert (await http.get("/checkpoint", params=params)).status_code == 400
        assert (await http.get("/checkpoint", params={"origin": "n\u00f6pe"})).status_code == 404
        assert (await http.get("/checkpoint?origin=%ff%fe%00")).status_code == 404
        assert (await http.get("/add-checkpoint")).status_code == 405
        assert await held() == state

        # two submissions racing from the same size: exactly one advances
        thirteen, fourteen = log.grow(1), log.grow(1)
        answers = await asyncio.gather(
            add(8, log.proof(8, 13), log.note(thirteen)),
            add(8, log.proof(8, 14), log.note(fourteen)),
        )
        assert sorted(a.status_code for a in answers) == [200, 409]

    # a damaged state file refuses that log (500), it never cosigns past it
    (state_file,) = (folder / "logs").glob("*.json")
    state_file.write_text("{")
    async with serve(create_app(witness)) as url, httpx.AsyncClient(base_url=url) as http:
        late = log.grow(1)
        refused = await http.post(
            "/add-checkpoint", content=AddCheckpoint(14, log.proof(14, 15), log.note(late)).body()
        )
        assert refused.status_code == 500


def snapshot(db: LogDb, into: Path) -> None:
    shutil.copytree(db.checkpoints / "tlog", into)


def roll_back(db: LogDb, snap: Path) -> None:
    """The insider puts back the checkpoint store's files as they were."""
    for name in ("checkpoint", "checkpoints.jsonl"):
        shutil.copy(snap / name, db.checkpoints / "tlog" / name)


async def test_a_rolled_back_checkpoint_store_is_named_and_never_cosigned_again(
    log_db: LogDb, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    hidden = f"hidden-{tag}"
    async with served(tmp_path / "w", log_db) as (url, witness):
        trust = TrustRoots(
            (TrustedKey("log", log_key(log_db).public),),
            (TrustedWitness(WITNESS, witness.key.public, url),),
            1,
        )
        pool = await open_pool(log_db.app_url, max_size=4)
        try:
            store = TlogStore(pool)
            key = load_private_key(log_db.signing_key)

            def sequencer() -> Sequencer:  # a fresh process's: it knows nothing of the witness
                return Sequencer(store, log_db.checkpoints, key, witnesses=trust.witnesses)

            heads = HeadLog(log_db.checkpoints, key.public_key())
            await write_sagas(log_db, [f"a-{tag}", f"b-{tag}"])
            assert (await sequencer().integrate()).witnessing.cosigned == [WITNESS]  # type: ignore[union-attr]
            snap = tmp_path / "snap"
            snapshot(log_db, snap)
            await write_sagas(log_db, [hidden], calls=3)
            assert (await sequencer().integrate()).witnessing.cosigned == [WITNESS]  # type: ignore[union-attr]
            assert witness.state(origin_of(log_db)).size == 14  # type: ignore[union-attr]
            assert await witness_findings(trust, heads, store) == []

            # heads 14 vanish from the checkpoint store; the witness remembers it
            roll_back(log_db, snap)
            found = await witness_findings(trust, heads, store)
            assert (
                found[0].fatal and f"witness {WITNESS} cosigned tree head 14 at " in found[0].detail
            )
            assert (
                "the latest published head is 8: the checkpoint store was rolled back"
                in found[0].detail
            )
            assert found[0].detail.endswith("(leaves 8..13); the leaf table still holds them")
            assert {(f.saga_id, f.seq) for f in found[1:]} == {(hidden, n) for n in range(1, 7)}
            assert all(f.fatal and "hidden by the rollback" in f.detail for f in found[1:])
            # the CLI says the same and fails
            env = env_of(log_db, tmp_path / "trust.json")
            write_trust(tmp_path / "trust.json", trust)
            code, out, _ = await asyncio.to_thread(cli, "log", "verify", env=env)
            assert code == 1 and f"FAILED  saga '{hidden}' seq 6: leaf 13: in tree head 14" in out

            # the sequencer, told by the witness, says heads were lost; the log still extends
            # them, so the head it signs over them is cosigned and nothing stays hidden
            healed = await sequencer().integrate()
            assert healed.witnessing is not None and healed.witnessing.cosigned == [WITNESS]
            assert any(
                "had cosigned tree head 14, newer than" in a for a in healed.witnessing.alerts()
            )
            assert await witness_findings(trust, heads, store) == []

            # the insider goes further: rolls the store back again, removes the hidden saga
            # from the journal and the log, and lets new rows in
            roll_back(log_db, snap)
            await owner_sql(
                log_db,
                ("DELETE FROM side_effect_journal WHERE saga_id = %s", (hidden,)),
                ("DELETE FROM sagacity_tlog_leaf WHERE idx >= 8", ()),
                ("DELETE FROM sagacity_tlog_node WHERE (idx + 1) << level > 8", ()),
            )
            await write_sagas(log_db, [f"new-{tag}"], calls=1)
            done = await sequencer().integrate()
            assert done.published is not None and done.size == 10
            assert done.witnessing is not None and done.witnessing.cosigned == []
            assert WITNESS in done.witnessing.refused
            assert any("refused to cosign tree head 10" in a for a in done.witnessing.alerts())
            assert witness.state(origin_of(log_db)).size == 14  # type: ignore[union-attr]
            found = await witness_findings(trust, heads, store)
            details = [f.detail for f in found if f.fatal]
            assert any("has 0 of the 1 witness cosignatures" in d for d in details)
            assert any(
                "cosigned tree head 14" in d and "published head is 10" in d for d in details
            )
            assert any("leaves 10..13 were removed" in d for d in details)
            # the leaves after the last head the witness cosigned are not the ones it saw
            replaced = {(f.saga_id, f.seq) for f in found if f.saga_id}
            assert replaced == {(f"new-{tag}", 1), (f"new-{tag}", 2)}
            # a log with a witness that refuses: `log integrate` exits 1 and says why
            await write_sagas(log_db, [f"more-{tag}"], calls=1)
            code, out, err = await asyncio.to_thread(cli, "log", "integrate", env=env)
            assert code == 1 and f"error: witness {WITNESS} refused to cosign tree head 12" in err
        finally:
            await pool.close()


async def test_a_fork_at_the_witnessed_size_is_named(log_db: LogDb, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    async with served(tmp_path / "w", log_db) as (url, witness):
        trust = TrustRoots(
            (TrustedKey("log", log_key(log_db).public),),
            (TrustedWitness(WITNESS, witness.key.public, url),),
            0,
        )
        pool = await open_pool(log_db.app_url, max_size=4)
        try:
            store = TlogStore(pool)
            key = load_private_key(log_db.signing_key)
            await write_sagas(log_db, [f"a-{tag}"])
            await Sequencer(store, log_db.checkpoints, key, witnesses=trust.witnesses).integrate()
            heads = HeadLog(log_db.checkpoints, key.public_key())
            # a witness that lost its state is named, as a warning
            (state,) = (tmp_path / "w" / "logs").glob("*.json")
            saved = state.read_bytes()
            state.unlink()
            (lost,) = await witness_findings(trust, heads, store)
            assert not lost.fatal and "holds no head of this log, though tree head 4" in lost.detail
            state.write_bytes(saved)
            # the log's key signs another head of size 4 into the store
            other = TreeHead(origin_of(log_db), 4, bytes(32))
            heads.publish(sign_note(other, [NoteSigner(other.origin, key)]), [], heads.latest().at)  # type: ignore[union-attr]
            found = [f for f in await witness_findings(trust, heads, store) if f.fatal]
            assert (
                len(found) == 1 and "a fork" in found[0].detail and "tree head 4" in found[0].detail
            )
        finally:
            await pool.close()


def test_no_witness_and_no_quorum_means_no_witness_findings(log_db: LogDb, tmp_path: Path) -> None:
    async def run() -> list[object]:
        pool = await open_pool(log_db.app_url, max_size=2)
        try:
            trust = TrustRoots((TrustedKey("log", log_key(log_db).public),))
            heads = HeadLog(log_db.checkpoints, log_key(log_db).public)
            return list(await witness_findings(trust, heads, TlogStore(pool)))
        finally:
            await pool.close()

    assert asyncio.run(run()) == []


def test_the_witness_command_keeps_its_key(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["witness", "--folder", str(tmp_path / "w"), "--show-key"])
    assert first.exit_code == 0, first.stderr
    vkey = first.stdout.splitlines()[0].removeprefix("witness key: ")
    key = NoteKey.parse(vkey)
    assert key.type == COSIGNATURE_V1 and key.name == "sagacity.local/witness"
    entry = json.loads(first.stdout.splitlines()[1].removeprefix("trust file entry: "))
    assert entry["url"] == "http://127.0.0.1:7380"
    assert base64.b64decode(entry["public_key"]) == key.public.public_bytes_raw()
    assert oct((tmp_path / "w" / "witness.pem").stat().st_mode & 0o777) == "0o600"
    again = runner.invoke(app, ["witness", "--folder", str(tmp_path / "w"), "--show-key"])
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0]
    for bad in (["--log", "junk"], ["--listen", "nowhere"], []):
        result = runner.invoke(app, ["witness", "--folder", str(tmp_path / "w"), *bad])
        assert result.exit_code == 2, (bad, result.stdout)


async def test_the_background_sequencer_gets_its_heads_cosigned(
    log_db: LogDb, tmp_path: Path
) -> None:
    await write_sagas(log_db, [f"bg-{uuid.uuid4().hex[:6]}"], calls=1)
    async with served(tmp_path / "w", log_db) as (url, witness):
        witnesses = (TrustedWitness(WITNESS, witness.key.public, url),)
        task = asyncio.create_task(
            run_sequencer(
                log_db.app_url,
                log_db.checkpoints,
                log_db.signing_key,
                every=0.05,
                witnesses=witnesses,
            )
        )
        try:
            latest = log_db.checkpoints / "tlog" / "checkpoint"
            for _ in range(200):
                if latest.exists() and f"\u2014 {WITNESS} " in latest.read_text():
                    break
                await asyncio.sleep(0.05)
            opened = open_note(latest.read_text(), log_key(log_db), [witness.key])
            assert opened.head.size == 2
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_the_quorum_counts_the_witnesses_that_cosigned(log_db: LogDb, tmp_path: Path) -> None:
    await write_sagas(log_db, [f"q-{uuid.uuid4().hex[:6]}"], calls=1)
    down = NoteKey("witness.test/down", Ed25519PrivateKey.generate().public_key(), COSIGNATURE_V1)
    async with served(tmp_path / "w", log_db) as (url, witness):
        pool = await open_pool(log_db.app_url, max_size=4)
        try:
            store = TlogStore(pool)
            key = load_private_key(log_db.signing_key)
            both = (
                TrustedWitness(WITNESS, witness.key.public, url),
                TrustedWitness(down.name, down.public, f"http://127.0.0.1:{free_port()}"),
            )
            done = await Sequencer(store, log_db.checkpoints, key, witnesses=both).integrate()
            assert done.witnessing is not None
            assert (
                done.witnessing.cosigned == [WITNESS] and down.name in done.witnessing.unreachable
            )
            heads = HeadLog(log_db.checkpoints, key.public_key())
            signer = (TrustedKey("log", key.public_key()),)
            one = await witness_findings(TrustRoots(signer, both, 1), heads, store)
            assert [f.fatal for f in one] == [False]  # the witness that is down: a warning
            two = await witness_findings(TrustRoots(signer, both, 2), heads, store)
            assert two[0].fatal and "has 1 of the 2 witness cosignatures" in two[0].detail
            assert f"(missing: {down.name})" in two[0].detail
        finally:
            await pool.close()


def test_a_witness_down_is_logged_once_and_a_refusal_every_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.witness")
    head = TreeHead("test.example/log", 3, bytes(32))
    missed = Witnessing(head, unreachable={WITNESS: "no answer in 3 s"})
    refused = Witnessing(head, refused={"w2": "409: it holds tree head 9"})
    back = Witnessing(head, cosigned=[WITNESS])
    with caplog.at_level(logging.INFO, logger="test.witness"):
        down = log_witnessing(log, missed, set())
        down = log_witnessing(log, missed, down)
        down = log_witnessing(log, None, down)  # a pass that asked no witness
        assert down == {WITNESS}
        log_witnessing(log, refused, down)
        log_witnessing(log, refused, down)
        assert log_witnessing(log, back, down) == set()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["WARNING", "ERROR", "ERROR", "INFO"]
    assert f"not cosigned by witness {WITNESS} yet" in said[0][1]
    assert "witness w2 refused to cosign tree head 3: 409" in said[1][1]
    assert said[3][1] == f"transparency log: witness {WITNESS} cosigns again"
