"""Approvals with edits: an approver's changed arguments checked before anything is journaled as
approved, and what changed, for whoever made the call to be told.

Everything here happens only for a decision that carries ``args``, which is new on the wire: no
recorded history holds such a decision, so the activity it schedules needs no patch marker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.journal.canonical import to_json
from sagacity.temporal import decode, limits, names
from sagacity.temporal.failures import error_message, error_type
from sagacity.temporal.models import Approve, EditCheck, EditChecked
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.signals import Refusals

#: how many calls' changes are kept for their callers (asked for right after the call returns)
_KEPT = 64
#: the longest a value is shown in a change's summary
_SHOWN = 80


@dataclass(frozen=True)
class Change:
    """An approval that changed a call's arguments: who, and both inputs as the journal holds
    them (secrets redacted)."""

    approver: str
    proposed: dict[str, Any]
    approved: dict[str, Any]

    def summary(self) -> str:
        """One line for the model: ``Approved with changes by alice: amount 1500 → 300``."""
        keys = sorted(set(self.proposed) | set(self.approved))
        parts = []
        for key in keys:
            before, after = self.proposed.get(key, _ABSENT), self.approved.get(key, _ABSENT)
            if before != after:
                parts.append(f"{key} {_shown(before)} → {_shown(after)}")
        return f"Approved with changes by {self.approver}: " + ("; ".join(parts) or "none")


_ABSENT = object()


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(none)"
    text = to_json(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


class Edits:
    """The edited approval being judged, the arguments it approved, and the calls it changed."""

    def __init__(self, core: SagaCore, journal: Journal) -> None:
        self._core = core
        self._journal = journal
        #: the edit of the decision being taken, once its arguments passed the check
        self.checked: EditChecked | None = None
        self.change: Change | None = None
        #: the newest edited decision refused, and why (the ``decide`` update answers with it)
        self.refused: tuple[Approve, str] | None = None
        #: an edit's arguments are being checked: other decisions wait for its verdict
        self.checking = False
        self._changes: dict[int, Change] = {}

    async def check(self, tool: str, decision: Approve, proposed_json: str) -> str | None:
        """Check ``decision``'s arguments for ``tool`` on the worker, as a call's are before its
        INTENT; why they are refused, or None (then :attr:`checked` holds them)."""
        self.checked = self.change = None
        args = decision.args
        assert args is not None
        size = limits.json_size(to_json(args))
        if size > limits.MAX_VALUE_BYTES:
            return (
                f"the edited arguments for {tool!r} are {size} bytes of JSON, over the "
                f"{limits.MAX_VALUE_BYTES} a call's arguments may be"
            )
        request = EditCheck(saga_id=self._core.saga_id, tool_name=tool, args=args)
        self.checking = True
        try:
            checked = await self._journal.activity(names.CHECK_EDIT, request, EditChecked)
        except ActivityError as err:
            if error_type(err) != "ToolArgumentsInvalid":
                raise
            return f"the edited arguments do not fit {tool!r}: {error_message(err)}"[:1000]
        finally:
            self.checking = False
        self.checked = checked
        self.change = Change(
            approver=decision.approver,
            proposed=_object(proposed_json),
            approved=_object(checked.input),
        )
        return None

    async def judged(
        self, tool: str, decision: Approve, proposed_json: str, refusals: Refusals
    ) -> bool:
        """Whether ``decision``'s edit may be taken (:meth:`check`); refused and recorded
        otherwise, for the ``decide`` update that sent it to answer with (:meth:`verdict`)."""
        why = await self.check(tool, decision, proposed_json)
        if why is None:
            return True
        refusals.refuse(decision.approver, why)
        self.refused = (decision, why)
        return False

    async def verdict(self, sent: Approve, journaled: Callable[[], bool]) -> None:
        """Wait until the edited approval ``sent`` is ``journaled`` or refused; a refusal is
        raised to the ``decide`` caller (recorded already, where it was judged)."""
        await workflow.wait_condition(lambda: journaled() or self._refusal_of(sent) is not None)
        refused = self._refusal_of(sent)
        if refused is not None:
            raise ApplicationError(
                decode.encodable(refused),
                "invalid_edit",
                type="ApprovalRefused",
                non_retryable=True,
            )

    def _refusal_of(self, decision: Approve) -> str | None:
        """Why ``decision`` (this very object) was refused, or None."""
        refused = self.refused
        return refused[1] if refused is not None and refused[0] is decision else None

    def ran(self, call_seq: int) -> None:
        """The call at ``call_seq`` ran under the edit just taken: its caller may ask."""
        if self.change is not None:
            self._changes[call_seq] = self.change
            if len(self._changes) > _KEPT:
                del self._changes[next(iter(self._changes))]
        self.checked = self.change = None

    def of(self, call_seq: int | None) -> Change | None:
        """How the approver changed the call at ``call_seq`` (None: not changed)."""
        return self._changes.get(call_seq) if call_seq is not None else None


def edited_fields(approved_hash: str) -> dict[str, Any]:
    """What an edited approval's row payload adds: that it is one, and the hash it approved."""
    return {"edited": True, "approved_input_hash": approved_hash}


def unsigned_approval(decision: Approve, edit: EditChecked | None) -> str:
    """An unsigned approval's row payload (no keyring): its approver, and an edit's hash."""
    if edit is None:
        return f"approver={decision.approver}"
    return to_json({"by": decision.approver, **edited_fields(edit.raw_input_hash)})


def _object(json_text: str) -> dict[str, Any]:
    try:
        value = json.loads(json_text) if json_text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
