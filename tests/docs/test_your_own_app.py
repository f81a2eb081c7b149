"""docs/your-own-app.md, followed as written: the travel app built from its blocks, then run.

The guide's code blocks that name a file (```` ```python file=travel_app/tools.py ````) are
written into an empty folder; its ```sh commands then run there as one reader's session (the
machinery of ``test_documented_commands``), from ``sagacity dev`` on a fresh stack, through a
``sagacity worker --app travel_app`` subprocess, to the four ways a saga ends. What the guide
says the reader sees (states, journal rows, verification, the app's own tables) must be there.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

from tests.docs.test_documented_commands import (
    BIN,
    REPO,
    fresh_clone_env,
    run_session,
    shell_commands,
)

GUIDE = REPO / "docs" / "your-own-app.md"
FILE_BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^\$ (.*)$", re.MULTILINE)
#: a row of ``sagacity saga journal``'s table: seq, tool, phase
JOURNAL_ROW = re.compile(r"^│ (\d+)\s+│[^│]+│ (\S+)\s+│ (\w+)\s+│", re.MULTILINE)
STATUS = re.compile(r"^saga (\S+): (\w+) \(journal head seq (\d+)\)$", re.MULTILINE)

BOOKINGS = [("book_flight", "INTENT"), ("book_flight", "EXECUTED")]
BOOKINGS += [("book_hotel", "INTENT"), ("book_hotel", "EXECUTED")]
THREE_BOOKINGS = [*BOOKINGS, ("rent_car", "INTENT"), ("rent_car", "EXECUTED")]
AT_THE_GATE = [*THREE_BOOKINGS, ("charge_card", "AWAITING_APPROVAL")]
UNDO_ALL = [("rent_car", "COMPENSATED"), ("book_hotel", "COMPENSATED")]
UNDO_ALL += [("book_flight", "COMPENSATED")]


def guide_files() -> dict[str, str]:
    """The guide's files by path, each block whole."""
    return dict(FILE_BLOCK.findall(GUIDE.read_text(encoding="utf-8")))


def outputs(transcript: str) -> list[tuple[str, str]]:
    """Each command of the session with what it printed (stderr comes last, after them all)."""
    parts = COMMAND.split(transcript)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def journal(output: str) -> list[tuple[str, str]]:
    rows = [(int(seq), tool, phase) for seq, tool, phase in JOURNAL_ROW.findall(output)]
    assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1)), output
    return [(tool, phase) for _, tool, phase in rows]


def bookings(output: str) -> list[tuple[str, str]]:
    """(kind, status) of each booking ``bookings.py`` printed, by kind."""
    return sorted(re.findall(r"^(car|flight|hotel)\s.*?\s(booked|cancelled)$", output, re.M))


def test_the_guide_names_every_file_of_its_layout() -> None:
    files = guide_files()
    assert set(files) == {
        "travel_app/__init__.py",
        "travel_app/db.py",
        "travel_app/tools.py",
        "travel_app/workflows.py",
        "travel_app/agent.py",
        "start_trip.py",
        "agent_trip.py",
        "bookings.py",
        "trip.json",
        "typo.json",
        "my_worker.py",
        "pytest.ini",
        "tests/test_undos.py",
    }
    layout = GUIDE.read_text(encoding="utf-8").split("```text\n", 1)[1].split("```", 1)[0]
    for path in files:
        assert Path(path).name in layout, path


def test_the_guide_builds_the_travel_app_and_runs_its_four_paths(tmp_path: Path) -> None:
    app = tmp_path / "travel"
    for path, body in guide_files().items():
        (app / path).parent.mkdir(parents=True, exist_ok=True)
        (app / path).write_text(body, encoding="utf-8")
    # section 5's worker imports as written (every name it uses exists); it is not run here.
    # The app is typed as the guide says: strict mypy in the app's own folder sees Sagacity's
    # types (py.typed) and finds nothing wrong, typed calls included. Both check the files
    # alone, so they run while the reader's session does (mypy alone takes half a minute).
    checks: dict[str, list[str | Path]] = {
        "import my_worker": [BIN / "python", "-c", "import my_worker"],
        "mypy --strict": [BIN / "python", "-m", "mypy", "--strict", "travel_app", "start_trip.py"],
    }
    with contextlib.ExitStack() as running:
        started = {
            name: running.enter_context(
                subprocess.Popen(
                    argv, cwd=app, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
            for name, argv in checks.items()
        }
        for proc in started.values():
            running.callback(proc.kill)  # a no-op once it has exited

        commands = list(shell_commands(GUIDE))
        assert not any(c.skipped for c in commands)
        env = fresh_clone_env(tmp_path / "data")
        transcript = run_session(commands, env=env, logs=tmp_path, cwd=app)
        for name, proc in started.items():
            output, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"{name}:\n{output}"
    ran = outputs(transcript)

    def said(command: str) -> list[str]:
        return [out for text, out in ran if text.startswith(command)]

    # the worker served the app: it ran under `sagacity worker --app travel_app`
    worker_log = next(tmp_path.glob("background-*.log"), None)
    assert worker_log is not None
    assert "worker ready" in "".join(p.read_text() for p in tmp_path.glob("background-*.log"))

    # every saga's states, in the order the guide walks them: completed after the approval,
    # compensated after the failure, compensated after the rejection, aborted
    states = [(state, int(seq)) for _, state, seq in STATUS.findall(transcript)]
    assert states == [
        ("completed", 4),
        ("awaiting_approval", 7),
        ("completed", 10),
        ("compensated", 8),
        ("awaiting_approval", 7),
        ("compensated", 11),
        ("awaiting_approval", 7),
        ("aborted", 11),
    ], transcript
    assert "why: ToolFailed: tool 'rent_car' failed: SoldOut: no cars to rent in Venice" in (
        transcript
    )
    # the misspelt steps file: refused whole, every mistake named, nothing ran (the journal
    # holds no saga for it: `verify --all` below counts five)
    (typo,) = said("sagacity saga start --steps typo.json")
    assert "exit 2: refused, nothing ran" in typo
    assert "StepsInvalid: the steps cannot run (3 problems)" in transcript
    assert "steps[1] ('book_hotell'): no tool named 'book_hotell'" in transcript
    assert "did you mean 'book_hotel'?" in transcript
    assert re.search(
        r"steps\[2\] \('book_hotel'\): argument 'nights': Input should be a valid integer",
        transcript,
    )
    assert re.search(
        r"steps\[3\] \('charge_card'\): argument 'traveler': \$ref 'book_flight' is object",
        transcript,
    )
    assert re.search(r"why: ApprovalRejected: charge_card rejected by \S+: over budget", transcript)
    assert "why: SagaAborted: aborted by unverified:ops-desk: ada cancelled the trip" in transcript
    # the abort is journaled as one, under the unsigned sender's name marked unverified
    rows = json.loads((app / "aborted.json").read_text())["rows"]
    assert json.loads(rows[7]["payload"]) == {
        "abort": True,
        "by": "unverified:ops-desk",
        "reason": "aborted: ada cancelled the trip",
    }
    assert transcript.count("exit 1: the saga did not complete") == 3

    agent, happy, failed, rejected, aborted = [
        journal(out) for out in said("sagacity saga journal") if out.strip()
    ]
    assert agent == BOOKINGS
    assert happy == [
        *AT_THE_GATE,
        ("approval-gate", "APPROVED"),
        ("charge_card", "INTENT"),
        ("charge_card", "EXECUTED"),
    ]
    assert failed == [
        *BOOKINGS,
        ("rent_car", "INTENT"),
        ("rent_car", "FAILED"),
        ("book_hotel", "COMPENSATED"),
        ("book_flight", "COMPENSATED"),
    ]
    assert rejected == [*AT_THE_GATE, ("approval-gate", "REJECTED"), *UNDO_ALL]
    assert aborted == rejected
    assert re.search(
        r"completed: Booked flight-agent-trip-\w+-1 and hotel-agent-trip-\w+-3\.", transcript
    )

    happy_verified, all_verified = said("sagacity verify")
    assert "1 sagas, 10 rows: all verified" in happy_verified
    assert "decision agrees" in happy_verified
    # every saga, however it ended, verifies against its checkpoint (and signed decisions)
    assert "5 sagas, 44 rows: all verified" in all_verified
    verdicts = re.findall(r"^ok\s+(\S+)\s+(\d+) rows\s+\[checkpoint agrees", all_verified, re.M)
    assert sorted(int(rows) for _, rows in verdicts) == [4, 8, 10, 11, 11], all_verified

    # section 8: the reader's own suite proves the app's undos, and prints one table
    (proofs,) = said("pytest -q tests")
    assert "4 passed" in proofs, proofs
    proof_rows = proofs.split("sagacity rollback proofs")[1].splitlines()
    assert [row.split() for row in proof_rows[2:6]] == [
        ["book_flight", "ok", "ok", "ok", "ok", "ok", "-"],
        ["book_hotel", "ok", "ok", "ok", "ok", "ok", "-"],
        ["rent_car", "ok", "ok", "ok", "ok", "ok", "-"],
        ["charge_card", "-", "-", "-", "-", "-", "ok"],
    ], proofs

    # the app's own tables: booked and charged, or every booking undone and nothing charged
    tables = said("python bookings.py")
    assert len(tables) == 5
    assert bookings(tables[0]) == [("flight", "booked"), ("hotel", "booked")]
    assert bookings(tables[1]) == [("car", "booked"), ("flight", "booked"), ("hotel", "booked")]
    assert "charged 840.00" in tables[1]
    assert bookings(tables[2]) == [("flight", "cancelled"), ("hotel", "cancelled")]
    for table in tables[2:]:
        assert not re.search(r"^charged", table, re.MULTILINE)
    for table in tables[3:]:
        assert bookings(table) == [
            ("car", "cancelled"),
            ("flight", "cancelled"),
            ("hotel", "cancelled"),
        ]
