"""docs/images/saga-graph.svg is what ``sagacity saga graph`` draws of the demo saga beside it.

``docs/images/saga-graph.sh`` made both from a real ``sagacity demo`` run: the saga's journal as
``saga journal --json`` printed it, and its picture. The journal must still verify (a sealed chain,
not a hand-written one) and the picture must be what the command draws of it today.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sagacity.evidence.bundle import entry_from_line
from sagacity.journal import verify_rows

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
JOURNAL, PICTURE = IMAGES / "saga-graph.json", IMAGES / "saga-graph.svg"


def test_the_checked_in_journal_is_a_demo_saga_that_verifies() -> None:
    document = json.loads(JOURNAL.read_text())
    rows = [entry_from_line(json.dumps(row)) for row in document["rows"]]
    assert document["saga_id"].startswith("demo-order-")
    assert verify_rows(document["saga_id"], rows).problem is None
    # the demo's first act: two calls, an approval, a failure, both calls compensated
    assert [(r.tool_name, str(r.phase)) for r in rows][-4:] == [
        ("send_confirmation", "INTENT"),
        ("send_confirmation", "FAILED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]


def test_the_picture_is_what_saga_graph_draws_of_that_journal() -> None:
    saga = json.loads(JOURNAL.read_text())["saga_id"]
    command = [str(Path(sys.executable).with_name("sagacity")), "saga", "graph", saga]
    drawn = subprocess.run(
        [*command, "--journal", str(JOURNAL), "--format", "svg"],
        capture_output=True,
        text=True,
        # the file alone: no database is asked
        env={**os.environ, "SAGACITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"},
        check=False,
        timeout=60,
    )
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout == PICTURE.read_text(), "regenerate it: docs/images/saga-graph.sh"
