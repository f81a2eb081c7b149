"""One saga's path (:class:`~sagacity.evidence.graph.SagaPath`) drawn as a self-contained SVG.

The layout is our own, since no Graphviz may be assumed: the forward path runs down the left
column in journal order; each compensation sits to the right of the call it undoes, so the
rollback reads upward, newest call first. Built with :mod:`xml.etree`, which escapes every
string it writes; each box says its status in words, its colours only repeat it. Colours and
fonts are presentation attributes, not a stylesheet, so the picture looks the same alone and
inline in the console, whose Content-Security-Policy allows no inline styles.
"""

from __future__ import annotations

from itertools import pairwise
from xml.etree import ElementTree as ET

from sagacity.evidence.graph import COLOURS, SagaPath, Step, lines, visible

__all__ = ["svg"]

_BOX_W, _BOX_H = 300, 84
_GAP_X, _GAP_Y = 70, 30
_MARGIN, _HEADER = 20, 62
_FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
_INK, _MUTED, _EDGE, _ROLLBACK = "#1c2330", "#5b6678", "#8b95a7", "#c62828"
#: characters a line of each size holds in a box (a conservative average glyph width)
_FITS = {13: 38, 11: 48}
_NOTE = "Calls and decisions run down the left; compensations beside the calls they undo, upward."


def svg(path: SagaPath) -> str:
    """The path as an SVG document (no XML declaration, so it also inlines into HTML)."""
    places = _layout(path)
    columns = max((col for col, _ in places.values()), default=0) + 1
    rows = max((row for _, row in places.values()), default=-1) + 1
    width = max(_MARGIN * 2 + columns * _BOX_W + (columns - 1) * _GAP_X, 700)
    height = _HEADER + rows * (_BOX_H + _GAP_Y) + 30
    root = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": str(width),
            "height": str(height),
            "viewBox": f"0 0 {width} {height}",
            "role": "img",
            "font-family": _FONT,
            "data-testid": "saga-graph",
        },
    )
    title = f"Saga {visible(path.saga_id)}: {path.caption}"
    ET.SubElement(root, "title").text = title
    defs = ET.SubElement(root, "defs")
    for name, colour in (("saga-graph-arrow", _EDGE), ("saga-graph-back", _ROLLBACK)):
        marker = ET.SubElement(
            defs,
            "marker",
            {
                "id": name,
                "viewBox": "0 0 10 10",
                "refX": "10",
                "refY": "5",
                "markerWidth": "7",
                "markerHeight": "7",
                "orient": "auto-start-reverse",
            },
        )
        ET.SubElement(marker, "path", {"d": "M0,0 L10,5 L0,10 z", "fill": colour})
    ET.SubElement(root, "rect", {"width": "100%", "height": "100%", "fill": "#ffffff"})
    _text(root, _MARGIN, 26, _clip(f"Saga {visible(path.saga_id)}", 70), 15, _INK, bold=True)
    _text(root, _MARGIN, 46, path.caption, 12, _MUTED)
    _edges(root, path, places)
    for step in path.steps:
        _box(root, step, *places[step.node])
    _text(root, _MARGIN, height - 12, _NOTE, 11, _MUTED)
    return ET.tostring(root, encoding="unicode") + "\n"


def _layout(path: SagaPath) -> dict[str, tuple[int, int]]:
    """Each step's (column, row): forward steps down column 0, compensations beside their call
    (further right for a call compensated more than once), others below the forward path."""
    places = {step.node: (0, row) for row, step in enumerate(path.forward)}
    taken: dict[int, int] = {}
    spare = len(path.forward)
    for step in path.undo:
        call = places.get(f"call{step.undoes}")
        if call is None:
            places[step.node] = (1, spare)
            spare += 1
            continue
        row = call[1]
        taken[row] = taken.get(row, 0) + 1
        places[step.node] = (taken[row], row)
    return places


def _corner(col: int, row: int) -> tuple[int, int]:
    return _MARGIN + col * (_BOX_W + _GAP_X), _HEADER + row * (_BOX_H + _GAP_Y)


def _box(root: ET.Element, step: Step, col: int, row: int) -> None:
    x, y = _corner(col, row)
    fill, line = COLOURS.get(step.status, ("#eef1f5", _EDGE))
    group = ET.SubElement(
        root,
        "g",
        {
            "data-testid": f"node-{step.kind}",
            "data-status": step.status,
            "data-seq": str(step.seq),
        },
    )
    if step.live:  # not data-live: the console's script reloads a page that has that
        group.set("data-effect", "live")
    said = lines(step)
    ET.SubElement(group, "title").text = "\n".join(said)
    paint = {
        "fill": fill,
        "stroke": _ROLLBACK if step.live else line,
        "stroke-width": "3" if step.live else "1.4",
    }
    if step.status == "suspect":
        paint["stroke-dasharray"] = "6 4"
    if step.kind == "gate":  # a decision has bevelled sides, so shape tells it apart too
        w, h, b = _BOX_W, _BOX_H, 14
        points = f"{x + b},{y} {x + w - b},{y} {x + w},{y + h // 2} {x + w - b},{y + h} "
        ET.SubElement(
            group, "polygon", {"points": points + f"{x + b},{y + h} {x},{y + h // 2}", **paint}
        )
    else:
        size = {"width": str(_BOX_W), "height": str(_BOX_H), "rx": "6"}
        ET.SubElement(group, "rect", {"x": str(x), "y": str(y), **size, **paint})
    styles = [(13, _INK, True), (11, line, True), (11, _MUTED, False), (11, _INK, False)]
    for i, (text, (size_px, colour, bold)) in enumerate(zip(said, styles, strict=False)):
        _text(group, x + 18, y + 22 + i * 17, _clip(text, _FITS[size_px]), size_px, colour, bold)


def _edges(root: ET.Element, path: SagaPath, places: dict[str, tuple[int, int]]) -> None:
    """Arrows down the forward path, across to the rollback and along it, and a dotted line from
    each compensation to its call."""
    forward = path.forward
    for a, b in pairwise(forward):
        _arrow(root, places[a.node], places[b.node], _EDGE, "saga-graph-arrow")
    if not path.undo:
        return
    if forward:
        _arrow(
            root, places[forward[-1].node], places[path.undo[0].node], _ROLLBACK, "saga-graph-back"
        )
    for a, b in pairwise(path.undo):
        _arrow(root, places[a.node], places[b.node], _ROLLBACK, "saga-graph-back")
    for step in path.undo:
        call = places.get(f"call{step.undoes}")
        if call is not None and places[step.node][1] == call[1] and places[step.node][0] == 1:
            x, y = _corner(*call)
            link = {"x1": str(x + _BOX_W), "x2": str(x + _BOX_W + _GAP_X), "y1": str(y + 60)}
            ET.SubElement(
                root,
                "line",
                {**link, "y2": str(y + 60), "stroke": "#3b5bdb", "stroke-dasharray": "3 3"},
            )


def _arrow(
    root: ET.Element, start: tuple[int, int], end: tuple[int, int], colour: str, marker: str
) -> None:
    """A straight arrow between two boxes' edges: vertical within a column, else side to side."""
    (ax, ay), (bx, by) = _corner(*start), _corner(*end)
    if start[0] == end[0]:
        x = ax + _BOX_W // 2
        y1, y2 = (ay + _BOX_H, by) if by > ay else (ay, by + _BOX_H)
        coords = (x, y1, x, y2)
    else:
        x1, x2 = (ax + _BOX_W, bx) if bx > ax else (ax, bx + _BOX_W)
        coords = (x1, ay + 30, x2, by + 30)
    ET.SubElement(
        root,
        "line",
        {
            **dict(zip(("x1", "y1", "x2", "y2"), map(str, coords), strict=True)),
            "stroke": colour,
            "stroke-width": "1.6",
            "marker-end": f"url(#{marker})",
        },
    )


def _text(
    parent: ET.Element, x: int, y: int, text: str, size: int, colour: str, bold: bool = False
) -> None:
    attrs = {"x": str(x), "y": str(y), "font-size": str(size), "fill": colour}
    if bold:
        attrs["font-weight"] = "600"
    ET.SubElement(parent, "text", attrs).text = text


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
