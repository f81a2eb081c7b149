"""Signed checkpoint logs and their keys: what a verifier accepts, and what it refuses."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

import sagacity.evidence as evidence
from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter, log_name
from sagacity.evidence.keys import generate_key, key_id, load_private_key, load_public_key

HASH = "ab" * 32


def test_a_log_reads_back_by_seq_with_its_signatures_checked(
    writer: CheckpointWriter, checkpoints: CheckpointDir
) -> None:
    for seq in (2, 1, 3, 3):  # out of order and repeated, as retried activities write them
        writer.record("s-1", seq, f"{seq:x}" * 64)

    log = checkpoints.load("s-1")

    latest = log.latest()
    assert latest is not None and (latest.seq, latest.key_id) == (3, key_id(checkpoints.key))
    assert [(cp.seq, cp.hash) for cp in log.verified()] == [(n, f"{n:x}" * 64) for n in (1, 2, 3)]
    assert log.problems == []
    assert checkpoints.load("never-written").latest() is None


def test_an_edited_or_damaged_line_is_a_problem_naming_its_line(
    writer: CheckpointWriter, checkpoints: CheckpointDir
) -> None:
    writer.record("s-2", 1, HASH)
    writer.record("s-2", 2, HASH)
    path = checkpoints.log_path("s-2")
    first, second = path.read_text().splitlines()
    edited = json.loads(second) | {"seq": 7}
    path.write_text(f"{first}\n{json.dumps(edited)}\n{second[:40]}\n")

    log = checkpoints.load("s-2")

    assert [cp.seq for cp in log.verified()] == [1]
    damaged, forged = log.problems  # damaged lines are found on reading, forged ones on use
    assert forged == f"{path.name} line 2: forged checkpoint: the signature does not verify"
    assert damaged.startswith(f"{path.name} line 3: damaged checkpoint: not JSON")


def test_two_signed_heads_for_one_seq_are_a_fork(
    writer: CheckpointWriter, checkpoints: CheckpointDir
) -> None:
    writer.record("s-3", 4, HASH)
    writer.record("s-3", 4, "cd" * 32)

    log = checkpoints.load("s-3")
    log.verified()
    (problem,) = log.problems

    assert "two signed heads for seq 4" in problem and "forked" in problem


@pytest.mark.parametrize("saga_id", ["order/7/../../etc", "Zoë's saga", ".", "x" * 300])
def test_any_saga_id_gets_a_safe_file_name_and_is_listed_back(
    writer: CheckpointWriter, checkpoints: CheckpointDir, saga_id: str
) -> None:
    writer.record(saga_id, 1, HASH)

    name = log_name(saga_id)
    assert "/" not in name and len(name.encode()) < 255
    assert (writer.path / name).is_file()
    assert list(checkpoints.saga_ids()) == [saga_id]
    assert checkpoints.load(saga_id).latest() is not None


def test_concurrent_writers_never_interleave_lines(
    writer: CheckpointWriter, checkpoints: CheckpointDir
) -> None:
    def write(start: int) -> None:
        for seq in range(start, start + 100):
            writer.record("busy", seq, HASH)

    threads = [threading.Thread(target=write, args=(n * 100 + 1,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    log = checkpoints.load("busy")
    assert [cp.seq for cp in log.verified()] == list(range(1, 801))
    assert log.problems == []


def test_checkpoints_need_both_settings_or_neither(tmp_path: Path, signing_key: Path) -> None:
    assert CheckpointWriter.open(None, None) is None
    with pytest.raises(EvidenceUnavailable, match="SAGACITY_SIGNING_KEY is not set"):
        CheckpointWriter.open(tmp_path, None)
    with pytest.raises(EvidenceUnavailable, match="SAGACITY_CHECKPOINT_DIR is not set"):
        CheckpointWriter.open(None, signing_key)
    assert CheckpointWriter.open(tmp_path / "cp", signing_key) is not None


def test_keys_are_private_to_their_owner_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    key = generate_key(path)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(EvidenceUnavailable, match="refusing to replace"):
        generate_key(path)
    assert key_id(load_public_key(path)) == key_id(key.public_key())
    assert key_id(load_private_key(path).public_key()) == key_id(key.public_key())
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(EvidenceUnavailable, match="not a readable PEM key"):
        load_public_key(tmp_path / "junk.pem")


def test_the_package_root_exports_what_it_lists() -> None:
    assert sorted(evidence.__all__) == sorted(evidence._MODULE_OF)
    assert all(getattr(evidence, name) is not None for name in evidence.__all__)


def test_a_pipe_in_place_of_a_log_is_named_and_never_waited_on(tmp_path: Path) -> None:
    """Someone who can write the checkpoint folder puts a FIFO where a saga's log goes: reading
    it would wait for a writer for ever (the sequencer reads logs in the worker). It is reported
    as not a regular file, at once."""
    key = generate_key(tmp_path / "k.pem")
    folder = CheckpointDir(tmp_path / "cp", key.public_key())
    (tmp_path / "cp").mkdir()
    os.mkfifo(folder.log_path("piped"))
    done: list[list[str]] = []
    reader = threading.Thread(
        target=lambda: done.append(folder.load("piped").problems), daemon=True
    )
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "the reader blocked on the pipe"
    assert done == [[f"{log_name('piped')}: not a regular file"]]


def test_a_pipe_in_place_of_a_long_named_log_is_listed_and_never_waited_on(tmp_path: Path) -> None:
    """A saga whose id is too long for a file name has a digest-named log, opened to learn its
    saga when the folder is listed: a FIFO there is listed by its name, at once."""
    key = generate_key(tmp_path / "k.pem")
    folder = CheckpointDir(tmp_path / "cp", key.public_key())
    (tmp_path / "cp").mkdir()
    piped = folder.log_path("s" * 200)
    os.mkfifo(piped)
    done: list[list[str]] = []
    reader = threading.Thread(target=lambda: done.append(list(folder.saga_ids())), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "listing the folder blocked on the pipe"
    assert done == [[piped.name.removesuffix(".jsonl")]]
