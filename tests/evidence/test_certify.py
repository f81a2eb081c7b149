"""``sagacity certify``: each kind of finding turns it non-zero naming the saga and the seq; a clean
set passes; the JUnit file parses. Rows are written through the journal store, as a worker writes
them, and tampered with as the tables' owner."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import psycopg
import pytest

from sagacity.journal import APPROVAL_GATE, Draft, Phase
from sagacity.store import ApprovalRequest, ApprovalStore, JournalStore, input_hash

EXECUTED_NONE = json.dumps({"type": "X", "message": "no", "effect": "none"})
FAILED_UNKNOWN = json.dumps({"type": "TimeoutError", "message": "timed out", "effect": "unknown"})


async def write(
    journal: JournalStore, saga_id: str, rows: list[tuple[str, Phase, str, str]]
) -> None:
    for tool, phase, given, payload in rows:
        await journal.append(Draft(saga_id, tool, phase, given, payload))


def call(tool: str, given: str = "{}", result: str = "{}") -> list[tuple[str, Phase, str, str]]:
    return [(tool, Phase.INTENT, given, ""), (tool, Phase.EXECUTED, given, result)]


async def certify(database_url: str, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run the installed command; its exit code, its JSON lines and its stderr."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sagacity")),
        "certify",
        "--json",
        *args,
        env={**os.environ, "SAGACITY_DATABASE_URL": database_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, [json.loads(line) for line in out.decode().splitlines()], err.decode()


def findings(lines: list[dict[str, Any]]) -> set[tuple[str, str, int | None]]:
    return {(f["saga_id"], f["kind"], f["seq"]) for line in lines for f in line["findings"]}


@pytest.fixture
def sid() -> str:
    return f"certify-{uuid.uuid4().hex[:8]}"


async def test_a_clean_set_passes_and_each_finding_kind_fails_naming_saga_and_seq(
    journal: JournalStore,
    database_url: str,
    owner: psycopg.AsyncConnection,
    sid: str,
    tmp_path: Path,
) -> None:
    sagas = {
        kind: f"{sid}-{kind}" for kind in ("done", "undone", "live", "stuck", "unknown", "edited")
    }
    # completed; and rolled back with every effect undone: both certified
    await write(journal, sagas["done"], [*call("a"), *call("b")])
    await write(journal, sagas["undone"], [
        *call("a", '{"n":1}'), ("b", Phase.INTENT, "{}", ""), ("b", Phase.FAILED, "{}", EXECUTED_NONE),
        ("a", Phase.COMPENSATED, '{"n":1}', ""),
    ])  # fmt: skip
    clean = [sagas["done"], sagas["undone"]]
    code, lines, err = await certify(database_url, *(f"--saga={s}" for s in clean))
    assert code == 0, err
    assert [line["certified"] for line in lines] == [True, True]
    assert "2 of 2 sagas certified" in err

    # rolled back, but a call that timed out (effect unknown) was never compensated
    await write(journal, sagas["live"], [
        *call("a"), ("b", Phase.INTENT, "{}", ""), ("b", Phase.FAILED, "{}", FAILED_UNKNOWN),
        ("a", Phase.COMPENSATED, "{}", ""),
    ])  # fmt: skip
    # a compensation that failed for good (seq 3), and one retried to success
    await write(journal, sagas["stuck"], [
        *call("a"), *call("b"), (APPROVAL_GATE, Phase.REJECTED, "{}", '{"by":"ops"}'),
        ("b", Phase.COMPENSATION_FAILED, "{}", "{}"), ("a", Phase.COMPENSATION_FAILED, "{}", "{}"),
        ("a", Phase.COMPENSATED, "{}", ""),
    ])  # fmt: skip
    # an INTENT with no outcome
    await write(journal, sagas["unknown"], [*call("a"), ("b", Phase.INTENT, "{}", "")])
    # a row rewritten behind the journal's back
    await write(journal, sagas["edited"], [*call("a"), *call("b")])
    await owner.execute(
        "UPDATE side_effect_journal SET payload = '{\"x\":2}' WHERE saga_id = %s AND seq = 2",
        (sagas["edited"],),
    )
    junit = tmp_path / "certify.xml"
    code, lines, err = await certify(
        database_url, *(f"--saga={s}" for s in sagas.values()), f"--junit={junit}"
    )
    assert code == 1
    assert findings(lines) == {
        (sagas["live"], "live_effect", 3),
        (sagas["stuck"], "compensation_failed", 6),
        (sagas["unknown"], "unknown_outcome", 3),
        (sagas["edited"], "evidence", 2),
    }
    assert "2 of 6 sagas certified; 4 need a person" in err

    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("6", "4")
    failed = {
        case.get("name"): [f.get("type") for f in case.findall("failure")]
        for case in suite.findall("testcase")
    }
    assert failed[sagas["done"]] == [] and failed[sagas["stuck"]] == ["compensation_failed"]


async def test_an_approval_waiting_past_its_sla_or_deadline_fails_it(
    journal: JournalStore, database_url: str, sid: str
) -> None:
    approvals = ApprovalStore(journal.pool)
    now = datetime.now(UTC)
    old, late, fresh = (f"{sid}-{k}" for k in ("old", "late", "fresh"))
    for saga_id, at, expires in (
        (old, now - timedelta(hours=30), None),
        (late, now - timedelta(minutes=5), now - timedelta(minutes=1)),
        (fresh, now - timedelta(minutes=5), now + timedelta(days=7)),
    ):
        await write(journal, saga_id, [*call("a"), ("wire", Phase.AWAITING_APPROVAL, "{}", "")])
        await approvals.put(
            ApprovalRequest(saga_id, 3, "wire", "{}", input_hash("{}"), at, expires)
        )
    code, lines, err = await certify(
        database_url, f"--saga={old}", f"--saga={late}", f"--saga={fresh}"
    )
    assert code == 1, err
    assert findings(lines) == {(old, "approval_overdue", 3), (late, "approval_overdue", 3)}
    code, lines, _ = await certify(database_url, f"--saga={old}", "--approval-sla=P2D")
    assert code == 0 and findings(lines) == set()


async def test_bad_input_is_exit_2_and_says_why(database_url: str) -> None:
    refusals = (
        (["--approval-sla=soon"], "--approval-sla"),
        (["--approval-sla=PT0S"], "longer than zero"),
        (["--since=yesterday"], "--since"),
        (["--saga=a\x01b"], "saga id"),
        (["--saga=x", "--since=PT1H"], "not both"),
    )
    runs = await asyncio.gather(*(certify(database_url, *args) for args, _ in refusals))
    for (args, said), (code, _, err) in zip(refusals, runs, strict=True):
        assert code == 2 and said in err, (args, err)
