"""A new user's own test suite, with nothing but Sagacity installed: the plugin's fixtures start
what it needs (here reaching the session's Temporal and Postgres server, as TEMPORAL_ADDRESS and
SAGACITY_DATABASE_URL say), serve its app, prove its tools and print one table at the end."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from sagacity.devstack import Endpoints

APP = '''
"""A hotel desk: seats and rooms held in this process."""
from sagacity import CompensationContext, compensable, current_call

HELD: set[str] = set()


def _hold(kind: str) -> dict[str, str]:
    call = current_call()
    hold_id = f"{kind}-{call.saga_id}-{call.seq}"
    HELD.add(hold_id)
    return {"hold_id": hold_id}


@compensable(by="free_seat")
def hold_seat(guest: str) -> dict[str, str]:
    return _hold("seat")


def free_seat(ctx: CompensationContext) -> None:
    HELD.discard(ctx.result["hold_id"] if not ctx.failed else f"seat-{ctx.saga_id}-{ctx.seq}")


@compensable(by="free_room")
def hold_room(guest: str) -> dict[str, str]:
    return _hold("room")


def free_room(ctx: CompensationContext) -> None:
    HELD.discard(ctx.result["hold_id"])


TOOLS = [hold_seat, hold_room]
'''

TESTS = """
import hotel_app


def held():
    return set(hotel_app.HELD)


async def test_hold_seat_undoes(sagacity_app, sagacity_prover):
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("hold_seat"), args={"guest": "ada"}, probe=held
    )
    report.assert_ok()


async def test_hold_room_undoes(sagacity_app, sagacity_prover):
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("hold_room"), args={"guest": "ada"}, probe=held
    )
    report.assert_ok()
"""

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
asyncio_default_test_loop_scope = session
pythonpath = .
sagacity_apps = hotel_app
"""


async def test_a_users_suite_proves_its_tools_and_prints_the_table(
    endpoints: Endpoints, tmp_path: Path
) -> None:
    (tmp_path / "hotel_app.py").write_text(APP)
    (tmp_path / "test_hotel.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text(INI)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "SAGACITY_TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        # the server's owner login: the plugin makes a journal database of its own there
        "SAGACITY_DATABASE_URL": endpoints.database_url,
    }
    # installed, Sagacity's entry point loads the plugin; from a source tree, name it
    installed = any(ep.value == "sagacity.testing.plugin" for ep in entry_points(group="pytest11"))
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    command += [] if installed else ["-p", "sagacity.testing.plugin"]
    ran = await asyncio.to_thread(
        subprocess.run, command, cwd=tmp_path, env=env, capture_output=True, text=True
    )

    out = ran.stdout
    assert "1 failed, 1 passed" in out, out + ran.stderr
    assert "RollbackNotProven: the undo of 'hold_room' is not proven:" in out
    table = out.split("sagacity rollback proofs")[1]
    assert table.splitlines()[2].split() == ["hold_seat", "ok", "ok", "ok", "ok", "ok", "-"]
    assert table.splitlines()[3].split() == [
        "hold_room",
        "ok",
        "BROKEN",
        "BROKEN",
        "BROKEN",
        "ok",
        "-",
    ]
    assert (
        "hold_room / failed_after_effect: on a call that failed after its effect (ctx.failed, "
        "no result), the undo raised TypeError: 'NoneType' object is not subscriptable: it "
        "assumed a result"
    ) in table
