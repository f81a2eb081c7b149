"""``sagacity saga graph`` on real Order sagas: approved, rejected and rolled back, SUSPECT.

The command runs as a user runs it (the installed executable) against the journal the sagas
wrote; its output is parsed back into boxes and arrows.
"""

from __future__ import annotations

from pathlib import Path

from sagacity.approvals import ApprovalService
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import Cli, MakeSuspects, StartOrder
from tests.evidence.test_graph import dot_graph, mermaid_graph, svg_graph


async def test_an_approved_order_is_drawn_in_every_format(
    cli: Cli, start_order: StartOrder, service: ApprovalService, tmp_path: Path
) -> None:
    waiting = await start_order()
    await service.approve(waiting.saga_id, waiting.seq, approver="alice")
    assert (await waiting.handle.result()).status is SagaState.COMPLETED

    shown = await cli("saga", "graph", waiting.saga_id)  # Mermaid unless told
    assert shown.code == 0, shown.stderr
    nodes, edges = mermaid_graph(shown.stdout)
    assert list(nodes) == ["call1", "call3", "gate5", "call7"]
    assert nodes["gate5"].startswith("approve send_confirmation?<br/>APPROVED · seq 5<br/>")
    assert nodes["gate5"].endswith("<br/>by alice")
    assert [(a, b) for a, _, b in edges] == [
        ("call1", "call3"),
        ("call3", "gate5"),
        ("gate5", "call7"),
    ]

    dot = tmp_path / "saga.dot"
    written = await cli("saga", "graph", waiting.saga_id, "--format", "dot", "--output", str(dot))
    assert written.code == 0 and written.stdout == ""
    assert list(dot_graph(dot.read_text())[0]) == list(nodes)

    svg = await cli("saga", "graph", waiting.saga_id, "--format", "svg")
    boxes, _ = svg_graph(svg.stdout)
    assert [b.split(":")[0] for b in boxes.values()] == [
        "executed",
        "executed",
        "approved",
        "executed",
    ]


async def test_a_rejected_order_shows_its_rollback_newest_first_from_the_database_or_a_file(
    cli: Cli, start_order: StartOrder, service: ApprovalService, tmp_path: Path
) -> None:
    waiting = await start_order()
    await service.reject(waiting.saga_id, waiting.seq, approver="alice", reason="wrong address")
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED

    drawn = await cli("saga", "graph", waiting.saga_id, "--format", "svg")
    assert drawn.code == 0, drawn.stderr
    boxes, _ = svg_graph(drawn.stdout)
    assert list(boxes) == ["call1", "call3", "gate5", "undo7", "undo8"]
    assert boxes["gate5"].startswith("rejected: approve send_confirmation? | REJECTED · seq 5")
    assert boxes["gate5"].endswith("| by alice: wrong address")
    assert boxes["undo7"].startswith("compensated: undo create_order")
    assert boxes["undo8"].startswith("compensated: undo reserve_inventory")

    # the same rows exported, drawn with no database
    exported = tmp_path / "journal.json"
    exported.write_text((await cli("saga", "journal", waiting.saga_id, "--json")).stdout)
    offline = await cli(
        "saga", "graph", waiting.saga_id, "--format", "svg", "--journal", str(exported)
    )
    assert offline.code == 0 and offline.stdout == drawn.stdout


async def test_a_suspect_call_is_marked(cli: Cli, make_suspects: MakeSuspects) -> None:
    (suspect,) = await make_suspects(1)
    drawn = await cli("saga", "graph", suspect.saga_id, "--format", "dot")
    assert drawn.code == 0, drawn.stderr
    nodes, _ = dot_graph(drawn.stdout)
    assert nodes[f"call{suspect.seq}"].startswith("create_order\\nSUSPECT: no outcome · seq ")


async def test_an_unknown_saga_or_format_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    missing = await cli("saga", "graph", "no-such-saga")
    assert (missing.code, missing.stdout) == (2, "")
    assert missing.stderr == "error: saga 'no-such-saga' has no rows in the journal\n"

    wrong = await cli("saga", "graph", "no-such-saga", "--format", "png")
    assert wrong.code == 2
    assert wrong.stderr == "error: --format 'png' is not one of: mermaid, dot, svg\n"

    broken = tmp_path / "journal.jsonl"
    broken.write_text('{"saga_id": "x"}\n')
    unreadable = await cli("saga", "graph", "x", "--journal", str(broken))
    assert unreadable.code == 2
    assert unreadable.stderr.startswith(f"error: {broken} line 1: a row needs exactly the fields")
