"""The export line format, exactly: the vector file an outsider checks their reader against, and
what a real Postgres row with a NULL or a short hash exports as.

``tests/evidence/vectors/bundle-rows.json`` lists one-row sagas: the fields of each row as a
bundle line holds them, the exact line, the hash recomputed by the rules of
``docs/hash-rules.md``, and what a verifier must say of it. The test rebuilds every case with
Sagacity's own code, writes them into a bundle folder by hand and verifies it: the file, the
code and the verifier must agree. ``SAGACITY_WRITE_VECTORS=1`` rewrites the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from sagacity.evidence.bundle import (
    FORMAT,
    JOURNAL,
    MANIFEST,
    BundleVerdict,
    entry_from_line,
    entry_line,
    verify_bundle,
)
from sagacity.evidence.export import export_bundle
from sagacity.evidence.keys import load_private_key
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, entry_hash
from sagacity.store import JournalStore
from tests.evidence.test_fresh_bundles import Log, log  # noqa: F401  (the per-test database)
from tests.evidence.test_tlog import LogDb, log_db  # noqa: F401

VECTORS = Path(__file__).parent / "vectors" / "bundle-rows.json"
STAMP = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def _case(
    name: str, why: str, verdict: str, *, stored_hash: str | None = None, **fields: Any
) -> dict[str, Any]:
    row = {
        "saga_id": f"vector-{name}",
        "seq": 1,
        "tool_name": "pay",
        "phase": "INTENT",
        "input": '{"amount":1}',
        "payload": "",
        "timestamp": STAMP,
        **fields,
    }
    unsealed = Entry(**{**row, "hash": ""})
    recomputed = entry_hash(GENESIS_HASH, unsealed)
    entry = Entry(**{**row, "hash": recomputed if stored_hash is None else stored_hash})
    line = entry_line(entry)
    return {
        "name": name,
        "why": why,
        "fields": json.loads(line),
        "line": line,
        "recomputed_hash": recomputed,
        "verdict": verdict,
    }


def cases() -> list[dict[str, Any]]:
    """Every case, built with Sagacity's code from fixed inputs."""
    genuine = entry_hash(
        GENESIS_HASH,
        Entry("vector-padded", 1, "pay", Phase.INTENT, '{"amount":1}', "", STAMP, ""),
    )
    return [
        _case(
            "plain",
            "an INTENT row: payload is the empty string, the timestamp 27 characters",
            "ok",
        ),
        _case(
            "executed",
            "non-ASCII is kept as UTF-8 text (no \\u escape); quotes inside the JSON text are "
            "escaped once, as any JSON string",
            "ok",
            phase="EXECUTED",
            input='{"to": "Zoë"}',
            payload='{"id": "tx0"}',
        ),
        _case(
            "json-null",
            'the tool\'s input is the JSON text null: the 4-character string "null", hashed as '
            "4:null,",
            "ok",
            input="null",
        ),
        _case(
            "sql-null",
            "a SQL NULL in input (the table refuses NULL: it was altered) is exported as the "
            "one-character string U+0000, which no stored text can hold; the row is refused "
            "even when its hash was recomputed over that character",
            "null",
            input="\x00",
        ),
        _case(
            "padded",
            "hash is character(64): a shorter stored value is read back blank-padded to 64 "
            "characters and exported so, untrimmed; compared as text with the recomputed "
            "digest it does not match",
            "hash_mismatch",
            stored_hash=genuine[:63] + " ",
        ),
        _case(
            "early",
            "years below 1000 keep four digits; zero microseconds still print six",
            "ok",
            timestamp=datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
        ),
    ]


def _bundle(folder: Path, rows: list[dict[str, Any]]) -> None:
    """A bundle by hand, as an outsider's exporter would write one: no anchors."""
    folder.mkdir()
    (folder / JOURNAL).write_text("".join(c["line"] + "\n" for c in rows), encoding="utf-8")
    data = (folder / JOURNAL).read_bytes()
    manifest = {
        "format": FORMAT,
        "version": 3,
        "created_at": "2026-01-02T03:04:05.000006Z",
        "hash_rules": "sagacity-journal-v1",
        "key_id": None,
        "anchors": [],
        "note": {},
        "sagas": [
            {
                "saga_id": c["fields"]["saga_id"],
                "rows": 1,
                "head_seq": 1,
                "head_hash": c["fields"]["hash"],
                "checkpointed": False,
            }
            for c in rows
        ],
        "files": {JOURNAL: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def test_the_vector_file_matches_the_code_and_the_verifier(tmp_path: Path) -> None:
    built = cases()
    text = json.dumps(built, indent=2, ensure_ascii=False, default=str) + "\n"
    if os.environ.get("SAGACITY_WRITE_VECTORS"):
        VECTORS.parent.mkdir(exist_ok=True)
        VECTORS.write_text(text, encoding="utf-8")
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
    assert vectors == json.loads(text), "the vectors no longer match the code"

    for case in vectors:
        entry = entry_from_line(case["line"])
        assert entry_line(entry) == case["line"], case["name"]
        assert len(case["fields"]["timestamp"]) == 27
        assert len(case["fields"]["hash"]) == 64
    by_name = {c["name"]: c for c in vectors}
    assert by_name["sql-null"]["line"].count("\\u0000") == 1
    assert '"input":"null"' in by_name["json-null"]["line"]
    assert by_name["padded"]["fields"]["hash"].endswith(" ")
    assert by_name["early"]["fields"]["timestamp"] == "0999-12-31T23:59:59.000000Z"

    _bundle(tmp_path / "b", vectors)
    report = verify_bundle(tmp_path / "b")
    assert report.problems == [] and report.rows == len(vectors)
    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    outcome = {}
    for saga in report.sagas:
        faults = saga.faults()
        problem = saga.verdict.problem
        if problem is not None:
            outcome[saga.saga_id] = problem.fault.value
        elif faults:
            outcome[saga.saga_id] = "null" if "is NULL" in faults[0].detail else faults[0].detail
        else:
            outcome[saga.saga_id] = "ok"
    assert outcome == {c["fields"]["saga_id"]: c["verdict"] for c in vectors}


async def test_a_null_and_a_short_hash_export_as_the_vectors_say_and_fail(
    log: Log,  # noqa: F811
    log_db: LogDb,  # noqa: F811
    tmp_path: Path,
) -> None:
    journal = JournalStore(log.pool)
    rows = [
        await journal.append(Draft("nulls", "pay", Phase.INTENT, "null")),
        await journal.append(Draft("nulls", "pay", Phase.EXECUTED, "null", '{"id": "tx0"}')),
        await journal.append(Draft("short", "pay", Phase.INTENT, '{"amount": 1}')),
    ]
    # the owner lifts the NOT NULL, NULLs the result of seq 2 and recomputes its hash over the
    # character a reader sees for NULL, so the chain itself still holds
    forged = entry_hash(rows[0].hash, replace(rows[1], payload="\x00"))
    async with await psycopg.AsyncConnection.connect(log_db.owner_url, autocommit=True) as owner:
        await owner.execute("ALTER TABLE side_effect_journal ALTER COLUMN payload DROP NOT NULL")
        await owner.execute(
            "UPDATE side_effect_journal SET payload = NULL, hash = %s WHERE saga_id = 'nulls' "
            "AND seq = 2",
            (forged,),
        )
        await owner.execute(
            "UPDATE side_effect_journal SET hash = left(hash, 63) WHERE saga_id = 'short'"
        )
    out = tmp_path / "bundle"
    key = load_private_key(log_db.signing_key)
    await export_bundle(journal, out, ["nulls", "short"], signing_key=key)
    lines = (out / JOURNAL).read_text(encoding="utf-8").splitlines()
    assert '"input":"null"' in lines[0] and '"payload":""' in lines[0]
    assert '"payload":"\\u0000"' in lines[1]
    short = json.loads(lines[2])["hash"]
    assert len(short) == 64 and short == rows[2].hash[:63] + " "

    report = verify_bundle(out, public_key=log.public)
    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    found = {s.saga_id: s.faults() for s in report.sagas}
    (null_fault,) = found["nulls"]
    assert null_fault.seq == 2 and "payload is NULL in the journal" in null_fault.detail
    (short_fault,) = found["short"]
    assert short_fault.seq == 1 and "hash_mismatch" in short_fault.detail
