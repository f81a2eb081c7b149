"""The operations run's last check: ``sagacity certify`` over its database agrees with the shop.

Certify must exit 0 only when no saga has anything live (by the shop's own tables: an effect in
force after a saga that did not complete) and no saga is flagged for a human; and it must fail
exactly those sagas. Its verdict is kept for the report, naming every saga it fails.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

CERTIFY_S = 300.0


@dataclass
class CertifyVerdict:
    """What ``sagacity certify --json`` said, and where it disagrees with the shop."""

    code: int
    #: the sagas it fails, with the kinds of its findings
    failing: dict[str, list[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        named = "; ".join(
            f"{sid} ({', '.join(kinds)})" for sid, kinds in sorted(self.failing.items())
        )
        return f"certify: exit {self.code}, {len(self.failing)} sagas failed" + (
            f": {named}" if named else ""
        )


async def certify_run(env: dict[str, str], expected_live: dict[str, str]) -> CertifyVerdict:
    """Run ``sagacity certify --json`` with ``env``; ``expected_live``: saga -> why a person must
    look at it (see :func:`~tests.chaos.operations_checks.live_sagas`)."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "sagacity"),
        "certify",
        "--json",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CERTIFY_S)
    except TimeoutError:
        proc.kill()
        await proc.communicate()
        return CertifyVerdict(-1, violations=[f"certify did not return in {CERTIFY_S:.0f}s"])
    verdict = CertifyVerdict(proc.returncode or 0)
    for line in out.decode(errors="replace").splitlines():
        try:
            cert = json.loads(line)
        except ValueError:
            continue
        if not cert.get("certified", True):
            verdict.failing[cert["saga_id"]] = [f["kind"] for f in cert.get("findings", [])]
    found = verdict.violations
    if verdict.code not in (0, 1):
        found.append(f"certify exited {verdict.code}: {err.decode(errors='replace')[-2000:]}")
    elif (verdict.code == 0) != (not verdict.failing):
        found.append(f"certify exited {verdict.code}, failing {sorted(verdict.failing)}")
    for sid, why in sorted(expected_live.items()):
        if sid not in verdict.failing:
            found.append(f"{sid}: certify passes it, though {why}")
    for sid, kinds in sorted(verdict.failing.items()):
        if sid not in expected_live:
            found.append(f"{sid}: certify fails it ({', '.join(kinds)}), with nothing live")
    return verdict
