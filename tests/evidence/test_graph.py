"""A saga's picture (``sagacity saga graph``): each example saga's path in Mermaid, DOT and SVG.

The rows are sealed by the journal core with the payloads the saga engine writes (an unsigned
approval's ``approver=``, a rejection's ``by``/``reason``, a failure's ``type``/``message``), so
the renderer reads what a real journal holds; the demo's own journal is drawn in
``tests/docs/test_saga_graph_image.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from xml.etree import ElementTree as ET

import pytest

from sagacity.evidence.graph import SagaPath, dot, mermaid, saga_path
from sagacity.evidence.graph_svg import svg
from sagacity.journal import APPROVAL_GATE, GENESIS_HASH, Draft, Entry, Phase, seal

T0 = datetime(2026, 12, 6, 9, 0, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"
Row = tuple[str, Phase, str, float]  # tool, phase, payload, seconds after T0


def sealed(saga: str, rows: list[Row]) -> list[Entry]:
    out: list[Entry] = []
    for seq, (tool, phase, payload, at) in enumerate(rows, 1):
        draft = Draft(saga, tool, phase, input='{"n": 1}', payload=payload)
        prev = out[-1].hash if out else GENESIS_HASH
        out.append(seal(draft, seq=seq, prev_hash=prev, timestamp=T0 + timedelta(seconds=at)))
    return out


def failure(kind: str, message: str, effect: str = "none") -> str:
    return json.dumps({"type": kind, "message": message, "effect": effect})


IN, E, F = Phase.INTENT, Phase.EXECUTED, Phase.FAILED
C, CF = Phase.COMPENSATED, Phase.COMPENSATION_FAILED

SAGAS: dict[str, list[Row]] = {
    "completed": [
        ("reserve", IN, "", 0),
        ("reserve", E, '{"id": 1}', 0.25),
        ("order", IN, "", 1),
        ("order", E, '{"id": 2}', 1.5),
    ],
    "compensated": [
        ("reserve", IN, "", 0),
        ("reserve", E, "{}", 0.1),
        ("order", IN, "", 1),
        ("order", E, "{}", 1.1),
        ("mail", IN, "", 2),
        ("mail", F, failure("SmtpError", "relay refused"), 2.2),
        ("order", C, "", 3),
        ("reserve", C, "", 4),
    ],
    "rejected": [
        ("reserve", IN, "", 0),
        ("reserve", E, "{}", 0.1),
        ("mail", Phase.AWAITING_APPROVAL, "", 1),
        (APPROVAL_GATE, Phase.REJECTED, json.dumps({"by": "alice", "reason": "wrong address"}), 5),
        ("reserve", C, "", 6),
    ],
    "aborted": [
        ("reserve", IN, "", 0),
        ("reserve", E, "{}", 0.1),
        ("order", IN, "", 1),
        ("order", E, "{}", 1.1),
        ("order", CF, json.dumps({"type": "Down", "message": "shop down", "attempts": 3}), 9),
        ("reserve", C, "", 10),
    ],
    "suspect": [
        ("reserve", IN, "", 0),
        ("reserve", E, "{}", 0.1),
        ("mail", Phase.AWAITING_APPROVAL, "", 1),
        (APPROVAL_GATE, Phase.APPROVED, "approver=bob", 61),
        ("charge", IN, "", 62),
    ],
}


def path_of(name: str, *, ended_unfinished: bool = False) -> SagaPath:
    return saga_path(name, sealed(name, SAGAS[name]), ended_unfinished=ended_unfinished)


def call_seqs(name: str) -> list[int]:
    return [i for i, (_, phase, _, _) in enumerate(SAGAS[name], 1) if phase is IN]


# -- each format, parsed back into nodes and edges ------------------------------------------


def mermaid_graph(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    nodes = dict(re.findall(r'^\s+(\w+)[\[{]"([^"]*)"[\]}]$', text, re.M))
    arrows = re.findall(r"^\s+(\w+) (-->|-\. [\w ]+ \.->) (\w+)$", text, re.M)
    return nodes, [(a, "next" if arrow == "-->" else arrow[3:-4], b) for a, arrow, b in arrows]


def dot_graph(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    assert text.startswith("digraph saga {") and text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    quoted = r'"((?:[^"\\]|\\.)*)"'
    nodes = dict(re.findall(rf"^\s+(\w+) \[label={quoted}", text, re.M))
    edges = []
    for a, b, attrs in re.findall(r"^\s+(\w+) -> (\w+)(?: \[(.*)\])?;$", text, re.M):
        label = re.search(r'label="([\w ]+)"', attrs)
        edges.append((a, "next" if label is None else label[1], b))
    return nodes, edges


def svg_graph(text: str) -> tuple[dict[str, str], list[ET.Element]]:
    root = ET.fromstring(text)  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg" and root.find(f"{SVG}title") is not None
    boxes = {}
    for group in root.iter(f"{SVG}g"):
        kind = group.get("data-testid", "").removeprefix("node-")
        prefix = {"call": "call", "gate": "gate", "compensation": "undo"}[kind]
        said = " | ".join(t.text or "" for t in group.iter(f"{SVG}text"))
        boxes[f"{prefix}{group.get('data-seq')}"] = f"{group.get('data-status')}: {said}"
    return boxes, list(root.iter(f"{SVG}line"))


@pytest.mark.parametrize("name", list(SAGAS))
def test_every_call_is_drawn_in_order_and_compensations_newest_first(name: str) -> None:
    path = path_of(name)
    calls = [f"call{seq}" for seq in call_seqs(name)]
    undone = [s.undoes for s in path.undo]
    # compensations run newest call first: the reverse of the order the calls ran in
    assert undone == sorted(undone, key=lambda seq: -(seq or 0))
    forward = [s.node for s in path.forward]
    undo = [s.node for s in path.undo]
    expected = [*pairwise(forward), *pairwise(undo)]
    for nodes, edges in (mermaid_graph(mermaid(path)), dot_graph(dot(path))):
        assert [n for n in nodes if n.startswith("call")] == calls
        assert set(nodes) == set(forward + undo)
        assert [(a, b) for a, kind, b in edges if kind == "next"] == expected
        assert [(a, b) for a, kind, b in edges if kind == "undoes"] == [
            (s.node, f"call{s.undoes}") for s in path.undo
        ]
        rollback = [(a, b) for a, kind, b in edges if kind == "rolls back"]
        assert rollback == ([(forward[-1], undo[0])] if undo else [])
    boxes, lines = svg_graph(svg(path))
    assert list(boxes) == forward + undo
    # an arrow between each pair of consecutive steps, the rollback's, a link to each undone call
    assert len(lines) == len(expected) + len(rollback) + len(undone)


def test_a_compensated_saga_shows_the_failure_and_what_was_undone() -> None:
    boxes, _ = svg_graph(svg(path_of("compensated")))
    assert boxes["call5"] == (
        "failed: mail | FAILED · seq 5 | 09:00:02.000 · 200 ms | SmtpError: relay refused"
    )
    assert boxes["undo7"] == "compensated: undo order | COMPENSATED · seq 7 | 09:00:03.000"
    assert boxes["undo8"].startswith("compensated: undo reserve")
    assert "LIVE EFFECT" not in " ".join(boxes.values())  # every effect was undone


def test_a_rejection_names_the_approver_and_the_wait() -> None:
    path = path_of("rejected")
    (gate,) = [s for s in path.forward if s.kind == "gate"]
    assert (gate.status, gate.detail, gate.when) == (
        "rejected",
        "by alice: wrong address",
        "09:00:01.000 · waited 4.0 s",
    )
    nodes, _ = mermaid_graph(mermaid(path))
    assert nodes["gate3"] == (
        "approve mail?<br/>REJECTED · seq 3<br/>09:00:01.000 · waited 4.0 s<br/>"
        "by alice: wrong address"
    )


def test_an_abort_whose_compensation_failed_leaves_that_effect_marked_live() -> None:
    path = path_of("aborted")
    live = [s.node for s in path.steps if s.live]
    assert live == ["call3"]  # order: its compensation failed; reserve was compensated
    text = mermaid(path)
    assert "  class call3 live\n" in text and "class call1 live" not in text
    assert 'call3 [label="order\\nEXECUTED · LIVE EFFECT · seq 3' in dot(path)
    boxes, _ = svg_graph(svg(path))
    assert boxes["undo5"] == (
        "compensation_failed: undo order | COMPENSATION FAILED · seq 5 | 09:00:09.000 | "
        "Down: shop down"
    )
    assert "LIVE EFFECT" in boxes["call3"]


def test_a_suspect_call_is_marked_and_an_unfinished_end_leaves_its_effects_live() -> None:
    path = path_of("suspect")
    boxes, _ = svg_graph(svg(path))
    assert boxes["call5"] == "suspect: charge | SUSPECT: no outcome · seq 5 | 09:01:02.000"
    assert boxes["gate3"].endswith("| 09:00:01.000 · waited 1 min 0 s | by bob")
    assert not any(s.live for s in path.steps)  # it has not rolled back: nothing left yet
    ended = path_of("suspect", ended_unfinished=True)  # terminated while it waited
    assert [s.node for s in ended.steps if s.live] == ["call1", "call5"]


def test_an_undecided_request_is_drawn_waiting() -> None:
    rows = sealed(
        "w",
        [("reserve", IN, "", 0), ("reserve", E, "{}", 1), ("mail", Phase.AWAITING_APPROVAL, "", 2)],
    )
    (gate,) = [s for s in saga_path("w", rows).forward if s.kind == "gate"]
    assert (gate.status, gate.label, gate.ended) == ("waiting", "AWAITING APPROVAL", None)


def test_a_broken_chain_is_said_in_the_caption() -> None:
    rows = sealed("t", SAGAS["completed"])
    rows[1] = replace(rows[1], payload='{"id": 9}')
    path = saga_path("t", rows)
    assert "journal chain BROKEN at seq 2" in path.caption
    assert "journal chain BROKEN at seq 2" in svg(path)


HOSTILE_TOOL = 'x"]</text><script>alert(1)</script>\u202e{y}'
HOSTILE_ERROR = '</text><script>alert("e")</script>\\N"; a -> b'


def test_hostile_journal_text_is_escaped_in_every_format() -> None:
    rows = sealed(
        "h<script>",
        [
            (HOSTILE_TOOL, IN, "", 0),
            (HOSTILE_TOOL, F, failure("Boom", HOSTILE_ERROR, "unknown"), 1),
            (HOSTILE_TOOL, C, "", 2),
        ],
    )
    path = saga_path("h<script>", rows)

    root = ET.fromstring(svg(path))
    assert not [e for e in root.iter() if "script" in e.tag]
    (call, _) = [g.findtext(f"{SVG}title") or "" for g in root.iter(f"{SVG}g")]
    # shown as text in full in the box's title (the box clips it), the bidi override escaped
    assert call.splitlines() == [
        'x"]</text><script>alert(1)</script>\\u202e{y}',
        "FAILED · seq 1",
        "09:00:00.000 · 1.0 s",
        'Boom: </text><script>alert("e")</script>\\N"; a -> b',
    ]
    assert "<script" not in svg(path)

    nodes, edges = mermaid_graph(mermaid(path))
    assert set(nodes) == {"call1", "undo3"} and len(edges) == 2
    assert "<script" not in mermaid(path) and '"]' not in nodes["call1"]

    nodes, edges = dot_graph(dot(path))
    assert set(nodes) == {"call1", "undo3"} and len(edges) == 2
    # the quote is escaped, so the label ends where the node's attributes go on
    assert nodes["call1"].startswith('x\\"]</text><script>alert(1)</script>\\\\u202e{y}\\n')
    assert '\\\\N\\"; a -> b' in nodes["call1"]


def test_a_corrected_effect_says_corrected_not_restored_with_what_the_correction_returned() -> None:
    rows = [
        ("quote", IN, "", 0),
        ("quote", E, '{"quote_id": "q-1"}', 0.1),
        ("mail", IN, "", 1),
        ("mail", F, failure("SmtpError", "relay refused"), 1.2),
        ("quote", C, json.dumps({"corrected": {"email_id": "corr-7"}}), 2),
    ]
    path = saga_path("q", sealed("q", rows))
    (undo,) = path.undo
    assert (undo.status, undo.title) == ("corrected", "correct quote")
    assert "corr-7" in undo.detail
    assert "CORRECTED, NOT RESTORED" in mermaid(path)
    assert "CORRECTED, NOT RESTORED" in dot(path)
    drawn = svg(path)
    assert "correct quote" in drawn and "corr-7" in drawn
    # a restoring undo of the same shape still says it was undone, not corrected
    restored = saga_path("r", sealed("r", [*rows[:4], ("quote", C, "", 2)]))
    assert (restored.undo[0].status, restored.undo[0].title) == ("compensated", "undo quote")
