"""One saga's path read from its journal rows, drawn as Mermaid or Graphviz DOT text.

:func:`saga_path` turns the rows into steps: each call with its outcome and times, each approval
with its approver, decision and wait, and the compensations in the order they ran (newest call
first). A call whose effect may still be in the world after the saga rolled back (or ended
unfinished) is marked *live*; a call with no outcome row is SUSPECT (or still running). The SVG
drawing of the same path is :mod:`sagacity.evidence.graph_svg`. Every string here comes from the
journal, so from tools and people: each format escapes it its own way, and characters that hide
or reorder text are written as ``\\uXXXX`` (:func:`visible`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Literal

from sagacity.evidence.decisions import payload_object
from sagacity.journal import (
    APPROVAL_GATE,
    ROLLBACK,
    Entry,
    Phase,
    read_calls,
    read_correction,
    rolled_back,
)
from sagacity.journal.verify import verify_rows

__all__ = ["FORMATS", "SagaPath", "Step", "dot", "duration", "mermaid", "saga_path", "visible"]

#: the formats ``sagacity saga graph`` writes
FORMATS = ("mermaid", "dot", "svg")

Kind = Literal["call", "gate", "compensation"]
#: an arrow in a format's syntax, and what follows its target (DOT's attributes)
Arrow = tuple[str, str]

#: what each status says in words: a picture never tells a phase by colour alone
LABELS = {
    "executed": "EXECUTED",
    "failed": "FAILED",
    "suspect": "SUSPECT: no outcome",
    "waiting": "AWAITING APPROVAL",
    "approved": "APPROVED",
    "rejected": "REJECTED",
    "compensated": "COMPENSATED",
    "corrected": "CORRECTED, NOT RESTORED",
    "compensation_failed": "COMPENSATION FAILED",
}
#: fill and line colour of each status
COLOURS = {
    "executed": ("#e3f4ea", "#1a7f37"),
    "failed": ("#fde7e5", "#c62828"),
    "suspect": ("#fff3d6", "#9a5b00"),
    "waiting": ("#fff3d6", "#9a5b00"),
    "approved": ("#e3f4ea", "#1a7f37"),
    "rejected": ("#fde7e5", "#c62828"),
    "compensated": ("#e8edff", "#3b5bdb"),
    "corrected": ("#fff4e0", "#b26a00"),
    "compensation_failed": ("#fde7e5", "#c62828"),
}
LIVE = "LIVE EFFECT"
_PREFIX = {"call": "call", "gate": "gate", "compensation": "undo"}


@dataclass(frozen=True, slots=True)
class Step:
    """One box of the path: a call, an approval (or another decision), or a compensation."""

    kind: Kind
    #: seq of the step's first row (the INTENT, the request, the compensation row)
    seq: int
    tool: str
    status: str
    started: datetime
    ended: datetime | None = None
    #: who decided (approvals), or the error (failures)
    detail: str = ""
    #: the call's effect may still be in the world though the saga did not complete
    live: bool = False
    #: for a compensation: the seq of the call it undoes (None: it names no call)
    undoes: int | None = None

    @property
    def node(self) -> str:
        """The step's id in every format: unique within the path."""
        return f"{_PREFIX[self.kind]}{self.seq}"

    @property
    def label(self) -> str:
        status = LABELS.get(self.status, self.status.upper())
        return f"{status} · {LIVE}" if self.live else status

    @property
    def title(self) -> str:
        """The step's name: the tool, or the tool an approval or compensation is about."""
        if self.kind == "gate":
            return f"approve {self.tool}?" if self.tool != ROLLBACK else "rollback"
        if self.kind == "compensation":
            # a COMPENSATABLE undo corrects the effect; it does not restore what was before
            return f"{'correct' if self.status == 'corrected' else 'undo'} {self.tool}"
        return self.tool

    @property
    def when(self) -> str:
        """Start time (UTC), and how long the step took or waited."""
        start = f"{self.started:%H:%M:%S}.{self.started.microsecond // 1000:03d}"
        if self.ended is None or self.kind == "compensation":
            return start
        took = duration(self.ended - self.started)
        return f"{start} · waited {took}" if self.kind == "gate" else f"{start} · {took}"


@dataclass(frozen=True, slots=True)
class SagaPath:
    """A saga's steps: the forward path in journal order, then its compensations as they ran."""

    saga_id: str
    forward: tuple[Step, ...]
    undo: tuple[Step, ...]
    #: whether the rows' hash chain verifies, in words
    chain: str

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.forward + self.undo

    @property
    def caption(self) -> str:
        calls = sum(1 for s in self.forward if s.kind == "call")
        gates = len(self.forward) - calls
        first = min((s.started for s in self.steps), default=None)
        since = "" if first is None else f"; times UTC, from {first:%Y-%m-%d %H:%M:%S}"
        return (
            f"{calls} call{'s' * (calls != 1)}, {gates} decision{'s' * (gates != 1)}, "
            f"{len(self.undo)} compensation{'s' * (len(self.undo) != 1)}; {self.chain}{since}"
        )


def saga_path(saga_id: str, rows: Sequence[Entry], *, ended_unfinished: bool = False) -> SagaPath:
    """The path the saga's ``rows`` (in seq order) tell.

    ``ended_unfinished``: the saga's workflow ended without completing or rolling back (it was
    terminated, it timed out), which only Temporal can tell: its effects are then live too.
    """
    calls = read_calls(rows)
    left_live = ended_unfinished or rolled_back(rows)
    undone_call = {u.seq: c.intent.seq for c in calls for u in c.undo}
    by_intent = {c.intent.seq: c for c in calls}
    forward: list[Step] = []
    undo: list[Step] = []
    asked: dict[str, Entry] = {}  # the open approval request, by the tool it is about
    for row in rows:
        if row.phase is Phase.INTENT:
            call = by_intent[row.seq]
            out = call.outcome
            forward.append(
                Step(
                    "call",
                    row.seq,
                    row.tool_name,
                    "suspect" if out is None else out.phase.value.lower(),
                    row.timestamp,
                    None if out is None else out.timestamp,
                    "" if out is None or out.phase is Phase.EXECUTED else _error(out.payload),
                    live=left_live and call.live is not None,
                )
            )
        elif row.phase is Phase.AWAITING_APPROVAL:
            asked[row.tool_name] = row
        elif row.phase in (Phase.APPROVED, Phase.REJECTED):
            request = _request_of(asked, row)
            start = row if request is None else request
            forward.append(
                Step(
                    "gate",
                    start.seq,
                    start.tool_name,
                    row.phase.value.lower(),
                    start.timestamp,
                    None if request is None else row.timestamp,
                    _decider(row.payload),
                )
            )
        elif row.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED):
            correction = read_correction(row.payload) if row.phase is Phase.COMPENSATED else None
            detail = correction.describe() if correction is not None else ""
            if row.phase is Phase.COMPENSATION_FAILED:
                detail = _error(row.payload)
            undo.append(
                Step(
                    "compensation",
                    row.seq,
                    row.tool_name,
                    "corrected" if correction is not None else row.phase.value.lower(),
                    row.timestamp,
                    detail=detail,
                    undoes=undone_call.get(row.seq),
                )
            )
    for request in asked.values():  # nobody has decided yet
        forward.append(Step("gate", request.seq, request.tool_name, "waiting", request.timestamp))
    forward.sort(key=lambda s: s.seq)
    verdict = verify_rows(saga_id, rows)
    problem = verdict.problem
    chain = (
        f"journal chain verifies ({verdict.rows} rows)"
        if problem is None
        else f"journal chain BROKEN at seq {problem.seq}: {problem.detail}"
    )
    return SagaPath(saga_id, tuple(forward), tuple(undo), chain)


def _request_of(asked: dict[str, Entry], decision: Entry) -> Entry | None:
    """The open request ``decision`` decides: the gate's rows decide the newest one; a tool's
    own REJECTED row (a refused approval) the one about that tool."""
    if decision.tool_name == APPROVAL_GATE and asked:
        newest = max(asked.values(), key=lambda r: r.seq)
        return asked.pop(newest.tool_name)
    return asked.pop(decision.tool_name, None)


def _decider(payload: str) -> str:
    """Who decided, and why, as the decision row says (signed, unsigned or ``approver=``)."""
    if payload.startswith("approver="):
        return f"by {payload.removeprefix('approver=')}"
    body = payload_object(payload) or {}
    by, reason = body.get("by"), body.get("reason")
    said = [f"by {by}" if isinstance(by, str) else "", reason if isinstance(reason, str) else ""]
    if body.get("edited") is True:
        said.append("with changes")  # the row's input is the approved one, not the request's
    return ": ".join(part for part in said if part)


def _error(payload: str) -> str:
    """A failure row's error: its type and message, else the payload as written."""
    body = payload_object(payload)
    if body is None:
        return payload
    kind, message = body.get("type"), body.get("message")
    if isinstance(message, str):
        return f"{kind}: {message}" if isinstance(kind, str) else message
    return payload


def duration(span: timedelta) -> str:
    """``span`` for a reader: ms under a second, then s, min, h, d."""
    seconds = span.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def visible(text: str) -> str:
    """``text`` with every character that is invisible or reorders others (bidi controls,
    zero-width marks, line separators, control and unassigned characters) written as its
    ``\\uXXXX`` escape, so a reader sees what a tool receives, in its order."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _HIDDEN else c for c in text)


_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def lines(step: Step) -> list[str]:
    """What a step's box says, line by line, before any format's escaping."""
    said = [step.title, f"{step.label} · seq {step.seq}", step.when]
    if step.detail:
        said.append(step.detail)
    return [visible(line) for line in said]


# -- Mermaid ---------------------------------------------------------------------------------


def mermaid(path: SagaPath) -> str:
    """The path as a Mermaid flowchart, top to bottom; compensations in a subgraph of their own."""
    out = [
        "flowchart TB",
        f"  %% saga {_mermaid_text(path.saga_id)}: {_mermaid_text(path.caption)}",
    ]
    for step in path.forward:
        out.append(f"  {step.node}{_mermaid_shape(step)}")
    if path.undo:
        out.append('  subgraph rollback["rollback, newest call first"]')
        out.extend(f"    {step.node}{_mermaid_shape(step)}" for step in path.undo)
        out.append("  end")
    out.extend(_edges(path, ("-->", ""), ("-. rolls back .->", ""), ("-. undoes .->", "")))
    for status, (fill, line) in COLOURS.items():
        out.append(f"  classDef {status} fill:{fill},stroke:{line},color:#1c2330")
    out.append("  classDef live stroke:#c62828,stroke-width:3px")
    for step in path.steps:
        out.append(f"  class {step.node} {step.status}")
        if step.live:
            out.append(f"  class {step.node} live")
    return "\n".join(out) + "\n"


def _mermaid_shape(step: Step) -> str:
    text = "<br/>".join(_mermaid_text(line) for line in lines(step))
    return f'{{"{text}"}}' if step.kind == "gate" else f'["{text}"]'


def _mermaid_text(text: str) -> str:
    """``text`` inside a quoted Mermaid label: everything but plain letters, digits and a few
    marks as an entity code (``#60;``), so no quote, bracket or markup of it reaches Mermaid."""
    return "".join(c if c.isalnum() or c in _MERMAID_PLAIN else f"#{ord(c)};" for c in text)


_MERMAID_PLAIN = frozenset(" _-.,:;/()=+@?!'·→")


def _edges(path: SagaPath, forward: Arrow, rolls_back: Arrow, undoes: Arrow) -> list[str]:
    """The path's arrows in the format's syntax: forward steps in order; from the last forward
    step to the first compensation; compensations in the order they ran; each to its call."""
    pairs = [(a.node, forward, b.node) for a, b in pairwise(path.forward)]
    if path.undo:
        if path.forward:
            pairs.append((path.forward[-1].node, rolls_back, path.undo[0].node))
        pairs += [(a.node, forward, b.node) for a, b in pairwise(path.undo)]
        pairs += [(s.node, undoes, f"call{s.undoes}") for s in path.undo if s.undoes is not None]
    return [f"  {a} {arrow} {b}{after}" for a, (arrow, after), b in pairs]


# -- Graphviz DOT ----------------------------------------------------------------------------


def dot(path: SagaPath) -> str:
    """The path as a Graphviz digraph, top to bottom; compensations in a cluster of their own."""
    out = [
        "digraph saga {",
        f"  label={_dot_text(f'saga {path.saga_id}: {path.caption}')};",
        "  labelloc=t; rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=11];',
    ]
    for step in path.forward:
        out.append(f"  {step.node} {_dot_node(step)};")
    if path.undo:
        out.append("  subgraph cluster_rollback {")
        out.append(f"    label={_dot_text('rollback, newest call first')};")
        out.extend(f"    {step.node} {_dot_node(step)};" for step in path.undo)
        out.append("  }")
    undoes = ("->", ' [style=dotted, label="undoes", constraint=false]')
    edges = _edges(path, ("->", ""), ("->", ' [style=dashed, label="rolls back"]'), undoes)
    out.extend(f"{edge};" for edge in edges)
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_node(step: Step) -> str:
    fill, line = COLOURS.get(step.status, ("#eef1f5", "#8b95a7"))
    shape = "diamond" if step.kind == "gate" else "box"
    width = 3 if step.live else 1
    label = _dot_text("\n".join(lines(step)))
    return f'[label={label}, shape={shape}, fillcolor="{fill}", color="{line}", penwidth={width}]'


def _dot_text(text: str) -> str:
    """``text`` as a DOT quoted string: backslashes and quotes escaped (so no ``\\N``-style
    escape of it is read), lines joined with ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
