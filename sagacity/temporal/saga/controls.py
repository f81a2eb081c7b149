"""Abort and cancel: who asked the saga to stop, the proof of it, and waits a cancel cannot break.

A Temporal cancel is an abort: compensation runs, shielded from the cancellation. The local
activities the saga waits on are counted too: updates are turned away while one runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from sagacity.errors import SagaAborted, SagaCancelled
from sagacity.evidence.decisions import Signature, Statement, signed_row
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import ROLLBACK
from sagacity.temporal import names
from sagacity.temporal.models import Abort, HaltNotice, JournalRow, SagaCarry
from sagacity.temporal.saga.core import SagaCore, loads
from sagacity.temporal.saga.signals import Refusals

T = TypeVar("T")

#: who a Temporal cancel is journaled as
CANCELLED_BY = "temporal-cancel"


def halt_abort(notice: HaltNotice) -> Abort:
    """The abort an operator's halt (policy ``compensate``) asks for."""
    return Abort(reason=f"halted: {notice.describe()}"[:2000], by=notice.operator)


class Controls:
    """The saga's abort: asked by a signal, the workflow's code, a halt, a cancel or a rollback."""

    def __init__(self, core: SagaCore, refusals: Refusals, carry: SagaCarry | None) -> None:
        self._core = core
        self._refusals = refusals
        self.abort: Abort | None = carry.abort if carry else None
        #: the abort came as a signal (its sender is checked), not from a cancel or a halt
        self.abort_signalled = carry.abort_signalled if carry else False
        #: the operator's halt the saga aborts for (its signature proves who halted)
        self.abort_halt: HaltNotice | None = carry.abort_halt if carry else None
        self.cancelled = carry.cancelled if carry else False
        #: local activities started and not yet returned to the workflow (see :meth:`shielded`)
        self.locals_running = 0

    @property
    def aborted(self) -> bool:
        return self.abort is not None

    @property
    def left_to_rollback(self) -> bool:
        """Whether this run ends because the saga was rolled back: its live effects are the
        rollback's to undo, not this run's (two undos of one effect could both run)."""
        return self.abort is not None and self.abort.by == ROLLBACK

    def request_abort(self, reason: str, by: str) -> None:
        """Abort as the ``abort`` signal from ``by`` would; a second abort changes nothing."""
        if self.abort is None:
            self.abort = Abort(reason=reason, by=by)

    def on_abort(self, *payloads: Any) -> None:
        # no payload at all is a plain abort
        abort = self._refusals.parse("abort", Abort, payloads or ({},))
        if abort is not None and self.abort is None:
            self.abort = abort
            self.abort_signalled = True

    def abort_for(self, notice: HaltNotice) -> None:
        """Abort for the operator's halt ``notice``, named as its signature proves."""
        self.abort = halt_abort(notice)
        self.abort_halt = notice

    def rolled_back(self, row: JournalRow) -> None:
        """An operator rolled the saga back (``sagacity saga rollback``) after an earlier run
        ended unfinished, and this run (a reset) reads it: it makes no call and ends aborted,
        naming the rollback; undoing is the rollback's, which owns the effects it found live."""
        body = loads(row.payload)
        who = str(body.get("by") or "?") if isinstance(body, dict) else "?"
        who = "".join(c for c in who[:200] if c.isprintable())  # a valid reason, whatever it held
        if self.abort is None or self.abort.by != ROLLBACK:
            self.abort = Abort(
                reason=f"the saga was rolled back by {who} (journal seq {row.seq}); a "
                "rolled-back saga makes no further call",
                by=ROLLBACK,
            )

    def raise_if_aborted(self) -> None:
        if self.abort is not None:
            kind = SagaCancelled if self.cancelled else SagaAborted
            by, _ = self._abort_sender(self.abort)
            raise kind(f"aborted by {by}: {self.abort.reason}")

    # -- cancellation ------------------------------------------------------------------------

    def refuse_if_busy(self, what: str) -> None:
        """Turn an update away while a local activity of the saga runs (in its validator, so
        nothing is recorded: sent again, it is taken). Accepted then, it could leave a history
        that does not replay, a Temporal SDK bug (docs/versioning.md)."""
        if self.locals_running:
            raise ApplicationError(
                f"the saga is running a local activity (opening or sealing its journal, or "
                f"reading its tool catalog): send the {what} again",
                "busy",
                type=names.SAGA_BUSY,
            )

    async def shielded(self, awaitable: Awaitable[T], *, local: bool = False) -> T:
        """Await an activity that a Temporal cancel must not interrupt; the cancel aborts.

        Give it the handle of a started activity (a task already): nothing more is created.
        ``local``: a local activity, counted in :attr:`locals_running` until it returns.
        """
        task = asyncio.ensure_future(awaitable)
        with self.local_running() if local else contextlib.nullcontext():
            while True:
                try:
                    return await asyncio.shield(task)
                except asyncio.CancelledError:
                    if task.cancelled():
                        raise
                    self.cancel_requested()

    @contextlib.contextmanager
    def local_running(self) -> Iterator[None]:
        """Count a local activity the workflow awaits inside, in :attr:`locals_running`."""
        self.locals_running += 1
        try:
            yield
        finally:
            self.locals_running -= 1

    async def wait(self, condition: Callable[[], bool], timeout: timedelta | None = None) -> None:
        """``wait_condition`` where a Temporal cancel aborts the saga instead of ending it."""
        while True:
            try:
                await workflow.wait_condition(condition, timeout=timeout)
                return
            except asyncio.CancelledError:
                self.cancel_requested()
                if condition():
                    return

    def cancel_requested(self) -> None:
        self.cancelled = True
        if self.abort is None:
            self.abort = Abort(reason="cancelled through Temporal", by=CANCELLED_BY)

    # -- who aborted -------------------------------------------------------------------------

    def abort_row(self, abort: Abort, reason: str, *, signed: bool) -> str:
        """The payload of the REJECTED row an abort writes: marked an abort, with its sender.

        With a keyring, a signalled abort's sender is the principal its signature proves, and a
        halt's the operator whose signature the halt carries, else ``unverified:<name>``; it is
        taken either way (an abort only makes the saga safer). A proven one's row carries the
        whole signature (``docs/decisions.md``); ``signed`` False: the older row, with the key
        id only. A cancel names who the workflow itself knows.
        """
        by, key_id = self._abort_sender(abort)
        proof = self._abort_proof(abort) if signed else None
        halt = {"halt": self.abort_halt.record()} if self.abort_halt and signed else {}
        if proof is not None:
            statement, signature = proof
            return signed_row(
                statement, signature, self._signer_name(signature), abort=True, **halt
            )
        row: dict[str, Any] = {"abort": True, "by": by, "reason": reason, **halt}
        if key_id is not None and not signed:
            row["key_id"] = key_id
        return to_json(row)

    def _abort_proof(self, abort: Abort) -> tuple[Statement, Signature] | None:
        """The signed statement that proves who aborted, verified with the keyring (None:
        unsigned, not verified, a cancel, or no keyring to check it with)."""
        keyring = self._core.keyring
        if keyring is None:
            return None
        halt = self.abort_halt
        if halt is not None:
            statement, signature = halt.statement(), halt.signature
        elif self.abort_signalled and abort.by is not None:
            statement, signature = abort.statement(self._core.saga_id), abort.signature
        else:
            return None
        if statement is None or signature is None:
            return None
        return (statement, signature) if keyring.refusal(statement, signature) is None else None

    def _signer_name(self, signature: Signature) -> str:
        keyring = self._core.keyring
        found = keyring.find(signature.key_id) if keyring is not None else None
        return found.name if found is not None else ""

    def _abort_sender(self, abort: Abort) -> tuple[str, str | None]:
        """Who sent ``abort``, as the journal and the saga's error name them, and the key that
        proves it (None: unsigned, or no keyring to check it with)."""
        name = abort.by or "sagacity"
        proven = self.abort_signalled or self.abort_halt is not None
        if not proven or self._core.keyring is None:
            return name, None
        proof = self._abort_proof(abort)
        if proof is not None:
            return name, proof[1].key_id
        return f"unverified:{name}", None
