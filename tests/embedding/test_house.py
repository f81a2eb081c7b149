"""The house stays as docs/architecture.md draws it: floors, rooms of one job, none too big.

A room is a top-level module or subpackage of ``sagacity``. Each room imports only rooms on
lower floors (the one arrow back up is named below), no two modules import each other in a
circle, every module says its one job in its docstring's first line, and none grows past the
sizes a maintainer can hold in mind: 800 lines a module, 400 a class. Read from the source
with :mod:`ast`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAGACITY = ROOT / "sagacity"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

MODULE_LINES = 800
CLASS_LINES = 400

#: the floors of docs/architecture.md's picture, lowest first
FLOORS: dict[str, int] = {
    "errors": 0,
    "asgi": 0,
    "rules": 0,
    "call_context": 0,
    "approval_policy": 0,
    "journal": 1,
    "tools": 1,
    "inputs": 1,
    "store": 2,
    "__init__": 2,
    "evidence": 3,
    "settings": 4,
    "devwitness": 4,
    "temporal": 5,
    "doctor": 5,
    "approvals": 6,
    "agents": 6,
    "observability": 6,
    "devkeys": 6,
    "workflow": 6,
    "mcp": 7,
    "devstack": 7,
    "worker": 8,
    "devsupervise": 8,
    "cli": 9,
    "testing": 9,
}

#: imports that run back up a floor, each with its reason in docs/architecture.md
UPWARD = {("settings.py", "sagacity.temporal.codec")}


def modules() -> Iterator[Path]:
    yield from sorted(SAGACITY.rglob("*.py"))


def room(path: Path) -> str:
    return path.relative_to(SAGACITY).parts[0].removesuffix(".py")


def dotted(path: Path) -> str:
    parts = ("sagacity", *path.relative_to(SAGACITY).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, anywhere: bool) -> set[str]:
    """The ``sagacity`` modules ``path`` imports: at its top level, or ``anywhere`` in it."""
    known = {dotted(module) for module in modules()}
    tree = ast.parse(path.read_text(), str(path))
    nodes = ast.walk(tree) if anywhere else iter(tree.body)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & known


def test_every_room_has_a_floor() -> None:
    assert {room(path) for path in modules()} == set(FLOORS)


def drawn(heading: str) -> dict[str, int]:
    """The floors the table under ``heading`` in docs/architecture.md draws, by name."""
    section = ARCHITECTURE.read_text().split(f"{heading}\n", 1)[1].split("\n#", 1)[0]
    floors = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            for name in cells[1].split(","):
                floors[name.strip().strip("`")] = int(cells[0])
    return floors


def test_the_picture_shows_the_floors_the_code_keeps() -> None:
    assert drawn("## The house: rooms on floors") == {
        ("sagacity" if name == "__init__" else name): n for name, n in FLOORS.items()
    }


@pytest.mark.parametrize(
    ("package", "heading"),
    [
        ("temporal/saga", "### The saga's parts"),
        ("temporal/activities", "### The activities' parts"),
    ],
)
def test_parts_import_only_parts_below_them_as_drawn(package: str, heading: str) -> None:
    floors = drawn(heading)
    folder = SAGACITY / package
    parts = {path.stem: path for path in folder.glob("*.py")}
    assert set(floors) == set(parts), "every part is drawn, and only parts that exist"
    prefix = dotted(folder) + "."
    upward = {
        (name, imported.removeprefix(prefix))
        for name, path in parts.items()
        for imported in imports(path, anywhere=True)
        if imported.startswith(prefix) and floors[imported.removeprefix(prefix)] >= floors[name]
    }
    assert upward == set()


def test_rooms_import_only_rooms_below_them() -> None:
    upward = set()
    for path in modules():
        here = FLOORS[room(path)]
        for name in imports(path, anywhere=True):
            there = name.split(".")[1] if "." in name else "__init__"
            if there != room(path) and FLOORS[there] >= here:
                upward.add((path.relative_to(SAGACITY).as_posix(), name))
    assert upward == UPWARD


def test_no_modules_import_each_other_in_a_circle() -> None:
    graph = {dotted(path): imports(path, anywhere=False) - {dotted(path)} for path in modules()}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as circle:
        raise AssertionError(f"import circle: {' -> '.join(circle.args[1])}") from None


def test_no_module_is_too_long_to_hold_in_mind() -> None:
    long = {
        path.relative_to(SAGACITY).as_posix(): lines
        for path in modules()
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_class_is_too_long_to_hold_in_mind() -> None:
    long = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > CLASS_LINES:
                    long[f"{path.relative_to(SAGACITY).as_posix()}:{node.name}"] = lines
    assert long == {}


def test_every_module_says_its_one_job_first() -> None:
    silent = [
        path.relative_to(SAGACITY).as_posix()
        for path in modules()
        if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip().splitlines()
    ]
    assert silent == []
