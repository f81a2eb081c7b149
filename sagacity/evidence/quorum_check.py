"""The verifier's check of a decision under an approval policy: its co-approvals, one by one.

A request row that records a ``policy`` (``docs/decisions.md``, co-approvals) is decided by a
row listing its co-approvals (``approvals``): an APPROVED row at least ``required`` of them, a
REJECTED row those received before it. Each must verify over its own statement, name a
distinct principal (and, signed with a personal key, a key no earlier one used), be in the
policy's group per the keyring, and not be the saga's starter when the policy forbids it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sagacity.approval_policy import read_policy

#: why a listed co-approval's signature does not prove it (None: it does), given the item
Verify = Callable[[dict[str, Any]], str | None]


def quorum_problems(
    seq: int,
    phase: str,
    request: Mapping[str, Any] | None,
    body: Mapping[str, Any] | None,
    groups: Mapping[str, Sequence[str]],
    verify: Verify,
    personal: Callable[[str], bool],
) -> tuple[list[str], int]:
    """What is wrong with the co-approvals of the decision row at ``seq`` (``body``, its
    payload) about the request whose payload is ``request``, and how many signatures verified.

    ``personal``: whether a key id is one person's (a service key may sign for several).
    """
    if request is None or "policy" not in request:
        return [], 0
    policy = read_policy(request.get("policy"))
    if policy is None:
        return [f"the request at seq {seq - 1} records a damaged approval policy"], 0
    listed = body.get("approvals") if body is not None else None
    if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
        listed = [] if phase == "REJECTED" and (body or {}).get("approvals") is None else None
        if listed is None:
            return [f"{phase.lower()} seq {seq} does not list its co-approvals"], 0
    problems: list[str] = []
    principals: set[str] = set()
    keys: set[str] = set()
    members = set(groups.get(policy.group, ())) if policy.group else None
    starter = request.get("started_by")
    verified = 0
    for item in listed:
        who, key = item.get("by"), item.get("key_id")
        why = verify(item)
        if why is not None:
            problems.append(f"co-approval by {who!r} in seq {seq}: {why}")
            continue
        verified += 1
        if who in principals:
            problems.append(f"approval seq {seq} lists {who!r} twice: co-approvers are distinct")
        elif isinstance(key, str) and key in keys and personal(key):
            problems.append(f"approval seq {seq} holds two co-signatures by the one key {key}")
        elif members is not None and who not in members:
            problems.append(f"co-approval by {who!r} in seq {seq}: not in group {policy.group!r}")
        elif not policy.starter_may_approve and isinstance(starter, str) and who == starter:
            problems.append(f"co-approval by {who!r} in seq {seq}: the starter may not approve")
        principals.add(str(who))
        keys.add(str(key))
    if phase == "APPROVED":
        if len(listed) < policy.required:
            problems.append(
                f"approval seq {seq} has {len(listed)} of the {policy.required} co-signatures "
                "its request requires"
            )
        signed = body.get("signature") if body is not None else None
        if signed is not None and not any(item.get("signature") == signed for item in listed):
            problems.append(f"approval seq {seq}: its own signature is not among its co-approvals")
    return problems, verified
