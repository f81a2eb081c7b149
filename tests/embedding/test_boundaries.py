"""The library stands alone: nothing under ``sagacity/`` imports the repository's ``workers`` or
``workflows`` packages, and the evidence layer reads Temporal's anchor without the Temporal glue.

Read from the source with :mod:`ast`, so an import inside a function counts as much as one at
the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

SAGACITY = Path(__file__).resolve().parents[2] / "sagacity"

#: ``sagacity demo`` and ``saga start``'s built-in workflow run the bundled Order and agent
#: examples, which live in ``workflows/``; these modules are the whole of that dependency, and
#: the list may only shrink (each must still import it, or the test asks to drop it)
RUNS_THE_BUNDLED_EXAMPLES = {
    "cli/_demo.py",
    "cli/_demo_recovery.py",
    "cli/_demo_worker.py",
    "cli/saga/start.py",
}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute names, wherever in the file the import is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def importers(package: str, under: Path = SAGACITY) -> dict[str, set[str]]:
    """The modules under ``under`` that import ``package`` (or a module of it), and what."""
    found = {}
    for path in sorted(under.rglob("*.py")):
        hits = {n for n in imported(path) if n == package or n.startswith(f"{package}.")}
        if hits:
            found[path.relative_to(SAGACITY).as_posix()] = hits
    return found


def test_no_library_module_imports_the_top_level_workers_package() -> None:
    assert importers("workers") == {}


def test_only_the_bundled_examples_commands_import_the_top_level_workflows_package() -> None:
    assert set(importers("workflows")) == RUNS_THE_BUNDLED_EXAMPLES


def test_the_evidence_layer_does_not_import_the_temporal_glue() -> None:
    assert importers("sagacity.temporal", SAGACITY / "evidence") == {}


def test_the_checks_see_imports_anywhere_in_a_module(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from workers.saga_worker import main\n    import workflows\n")

    assert imported(module) == {"workers.saga_worker", "workflows"}
