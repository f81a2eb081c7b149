"""The published evidence test vectors: regenerated from the library, they must equal the
committed files byte for byte (so they never go stale), and the independent verifier, written from
the docs alone, must pass every one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from tests.evidence import independent_verifier
from tests.evidence.vectors import make_vectors

FOLDER = Path(make_vectors.__file__).parent


@pytest.mark.parametrize("name", sorted(make_vectors.FILES))
def test_committed_vectors_are_what_the_library_makes(name: str) -> None:
    committed = (FOLDER / name).read_text(encoding="utf-8")
    assert committed == make_vectors.render(make_vectors.FILES[name]), (
        f"{name} is stale: run `.venv/bin/python -m tests.evidence.vectors.make_vectors`, and "
        "update docs/evidence.md and docs/hash-rules.md if a rule changed"
    )


def test_the_independent_verifier_passes_every_vector() -> None:
    assert independent_verifier.check_vectors(FOLDER) == []


def test_the_independent_verifier_fails_a_vector_changed_by_one_byte(tmp_path: Path) -> None:
    for name in make_vectors.FILES:
        (tmp_path / name).write_text((FOLDER / name).read_text(encoding="utf-8"), encoding="utf-8")
    rows = tmp_path / "rows.json"
    rows.write_text(rows.read_text(encoding="utf-8").replace("Zoë", "Zoe", 1), encoding="utf-8")
    merkle = tmp_path / "merkle.json"
    text = merkle.read_text(encoding="utf-8")
    merkle.write_text(text.replace('"row_hash": "', '"row_hash": "0', 1), encoding="utf-8")
    failures = independent_verifier.check_vectors(tmp_path)
    assert any(f.startswith("rows: hash") for f in failures), failures
    assert any(f.startswith("merkle: leaf 1") for f in failures), failures


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"])
def test_a_saga_id_holding_a_unicode_line_break_verifies(tmp_path: Path, char: str) -> None:
    signing = make_vectors.seeded_key("line-break")
    saga_id = f"order{char}1"
    CheckpointWriter(tmp_path, signing).record(saga_id, 1, "ab" * 32)
    log = CheckpointDir(tmp_path, signing.public_key()).load(saga_id)
    assert log.problems == []
    latest = log.latest()
    assert latest is not None and latest.seq == 1
