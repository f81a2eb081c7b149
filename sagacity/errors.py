"""Every error Sagacity raises, under one root, each with a stable code."""

from __future__ import annotations


class SagacityError(Exception):
    """Root of all Sagacity errors. ``code`` is stable across releases."""

    code = "sagacity_error"


class InvalidEntry(SagacityError, ValueError):
    """A journal entry was refused before anything was written."""

    code = "invalid_entry"


class InvalidInput(SagacityError, ValueError):
    """Input from outside (a file, an argument, a request body) was refused before it was used.

    The message says what was wrong and where (a JSON path such as ``steps[0].tool``).
    """

    code = "invalid_input"


class ChainBroken(SagacityError):
    """A saga's hash chain does not verify."""

    code = "chain_broken"


class SeqConflict(SagacityError):
    """A different row already holds the ``seq`` an append asked for."""

    code = "seq_conflict"


class SeqTaken(SeqConflict):
    """An exclusive append found its very row already written, by someone else."""

    code = "seq_taken"


class JournalAhead(SeqConflict):
    """The journal holds rows past the ones this run knows: another run of the saga wrote them.

    The workflow re-reads the journal and goes on from its real head; nothing is written.
    """

    code = "journal_ahead"


class SagaIdTaken(SagacityError):
    """The saga id already names a journal written by another workflow run chain.

    One id, one journal: start the saga under a new id (a reset or continue-as-new of the
    original run continues its journal instead).
    """

    code = "saga_id_taken"


class AppendContention(SagacityError):
    """An append lost the race for the next ``seq`` more times than the retry bound allows."""

    code = "append_contention"


class StoreUnavailable(SagacityError):
    """The journal database could not be reached or refused the operation."""

    code = "store_unavailable"


class ToolDeclarationError(SagacityError, TypeError):
    """A tool or its compensation is declared wrongly; the message names the tool and the fix."""

    code = "tool_declaration"


class UnknownTool(SagacityError, LookupError):
    """A saga step names a tool no worker registered."""

    code = "unknown_tool"


class ToolArgumentsInvalid(SagacityError, TypeError):
    """A step's arguments do not match the tool's signature."""

    code = "tool_arguments"


class ResultNotSerializable(SagacityError, TypeError):
    """A tool returned a value that cannot be journaled as JSON."""

    code = "result_not_serializable"


class NoEffect(SagacityError):
    """Raise from a tool to say it failed without taking any effect, so nothing is compensated.

    Any other exception leaves the call's effect unknown: it is FAILED and still compensated
    (or, with no compensation, flagged for a human). ``@compensable(no_effect_on=...)`` names
    further exception types that mean the same.
    """

    code = "no_effect"


class ToolTimeout(SagacityError, TimeoutError):
    """A tool did not return within its timeout; whether it took effect is unknown."""

    code = "tool_timeout"


class UpstreamToolError(SagacityError):
    """An MCP upstream's call failed: its result said ``isError`` (``is_error_result``: the
    upstream itself reported the failure, so the call had no effect unless the policy says it
    may), or the connection broke, the protocol failed or the call timed out (effect unknown)."""

    code = "mcp_upstream"

    def __init__(self, message: str, *, is_error_result: bool = False) -> None:
        super().__init__(message)
        self.is_error_result = is_error_result


class UpstreamReported(UpstreamToolError):
    """An MCP upstream answered that the call failed (an ``isError`` result, or a JSON-RPC
    error): unless the policy says ``error_may_have_effect``, the call had no effect."""

    code = "mcp_upstream_reported"

    def __init__(self, message: str) -> None:
        super().__init__(message, is_error_result=True)


class UpstreamUnavailable(UpstreamToolError):
    """An MCP upstream could not be reached (started, connected or initialised)."""

    code = "mcp_upstream_unavailable"


class SuspectCall(SagacityError):
    """An INTENT has no outcome: a worker died mid-call and a human must say what happened."""

    code = "suspect_call"


class Halted(SagacityError):
    """An operator's halt or quarantine covers this call or compensation: it did not start.

    ``halt_id`` names the halt (``sagacity halt list``); the saga waits until it is lifted.
    """

    code = "halted"

    def __init__(self, message: str, halt_id: int) -> None:
        super().__init__(message)
        self.halt_id = halt_id


class CompensationFailed(SagacityError):
    """A compensation kept failing after its retry bound; the effect is still live."""

    code = "compensation_failed"


class PermanentCompensationError(SagacityError):
    """Raise from a compensation to say no retry can make it succeed (the thing to undo is in a
    state the undo cannot handle, the undo is wrong for this call).

    COMPENSATION_FAILED is journaled at once instead of after the retry bound, the saga goes on
    undoing its other effects, and it ends flagged for a human: this effect is still live.
    Python's programming errors in an undo (``TypeError``, ``AttributeError``, ``NameError``)
    and a missing key of its context (:class:`ContextKeyMissing`) count the same.
    """

    code = "permanent_compensation"


class ContextKeyMissing(PermanentCompensationError, KeyError):
    """A compensation looked up a key its call's ``input`` or ``result`` does not hold (at any
    depth): ``ctx.result["id"]`` on a result without one. Retrying reads the same data, so
    the compensation fails at once. A ``KeyError``: ``except KeyError`` still catches it."""

    code = "context_key_missing"

    def __init__(self, key: object, where: str = "context") -> None:
        super().__init__(key)
        self.key = key
        self.where = where

    def __str__(self) -> str:
        return f"{self.key!r} is not in the call's {self.where}"


class ResultUnavailable(SagacityError):
    """A compensation was not run: the journal, where it must read the call's input or result,
    does not hold the real one (redacted, or never journaled). A human must undo the effect."""

    code = "result_unavailable"


class ApprovalRefused(SagacityError):
    """An approval decision was refused (unknown seq, already decided, wrong hash, not waiting)."""

    code = "approval_refused"


class SettingsError(SagacityError, ValueError):
    """A setting is missing or malformed; the message names it and what was expected."""

    code = "settings"


class PolicyError(SettingsError):
    """An MCP policy file is unreadable or wrong; the message names the file, the key (and its
    line) and what was expected."""

    code = "mcp_policy"


class CompensationUnresolvable(PermanentCompensationError):
    """A policy-mapped compensation cannot be built for this call: a mapped path of its input or
    result names nothing. No retry can fix it; a human must undo the effect."""

    code = "compensation_unresolvable"


class ToolFailed(SagacityError):
    """A tool call in a saga failed (FAILED is journaled), or was refused before it ran (``ran``
    false: its tool is unknown or its arguments do not fit, and nothing was journaled for it);
    the saga compensates."""

    code = "tool_failed"

    def __init__(self, tool_name: str, error_type: str, message: str, *, ran: bool = True) -> None:
        what = "failed" if ran else "was refused before it ran"
        super().__init__(f"tool {tool_name!r} {what}: {error_type}: {message}")
        self.ran = ran
        self.tool_name = tool_name
        self.error_type = error_type
        self.error_message = message


class SagaAborted(SagacityError):
    """Someone sent the saga an ``abort`` signal; it compensates."""

    code = "saga_aborted"


class SagaCancelled(SagaAborted):
    """The saga's workflow was cancelled through Temporal; like an abort, it compensates."""

    code = "saga_cancelled"


class ApprovalRejected(SagacityError):
    """A call waiting for approval was rejected (by a human, a deadline or failed verification).

    ``tool``, ``by`` and ``reason`` say which call, who rejected it and why; ``message`` is what
    the approver told whoever made the call to do instead (None when nothing). They are None
    when the gate did not say (a call refused because its approved input failed to verify).
    """

    code = "approval_rejected"

    def __init__(
        self,
        text: str,
        *,
        tool: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(text)
        self.tool = tool
        self.by = by
        self.reason = reason
        self.message = message


class ApprovalNotFound(ApprovalRefused):
    """No such saga, or no approval request pending at that seq."""

    code = "approval_not_found"


class ApproverNotAllowed(ApprovalRefused):
    """The approver is not on the allow-list for the tool awaiting approval."""

    code = "approver_not_allowed"


class DecisionUnsigned(ApprovalRefused):
    """A keyring is configured and the decision cannot be signed as its principal: no key to
    sign with, or a key the keyring does not trust for that principal."""

    code = "decision_unsigned"


class ApprovalConflict(ApprovalRefused):
    """The saga is not waiting for this decision.

    ``kind`` says why: ``unknown_seq``, ``already_decided``, ``not_waiting`` or
    ``input_hash_mismatch``.
    """

    code = "approval_conflict"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SagaNotFound(SagacityError):
    """No saga (workflow) with that id in the Temporal namespace."""

    code = "saga_not_found"


class ResolutionRefused(SagacityError):
    """A resolution of a SUSPECT call was refused; nothing was sent, or the saga did not take it."""

    code = "resolution_refused"


class SuspectNotFound(ResolutionRefused):
    """The saga has no SUSPECT call at that seq (it runs, waits for something else, or another seq)."""

    code = "suspect_not_found"


class ResolverNotAllowed(ResolutionRefused):
    """The resolver may not resolve this tool's SUSPECT calls (``SAGACITY_RESOLVERS``)."""

    code = "resolver_not_allowed"


class SuspectConflict(ResolutionRefused):
    """The SUSPECT call cannot be resolved now.

    ``kind`` says why: ``already_resolved`` (its outcome is journaled), ``not_waiting`` (the saga
    has ended) or ``refused`` (the saga refused the resolution it was sent).
    """

    code = "suspect_conflict"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SagaUnavailable(SagacityError):
    """A saga did not answer (no worker polling its task queue, or Temporal unreachable)."""

    code = "saga_unavailable"


class AgentRunFailed(SagacityError):
    """An agent run inside a saga ended in an error of the Agents SDK (max turns, a model failure)."""

    code = "agent_run_failed"


class SessionEnded(SagacityError):
    """An MCP gateway session's saga was rolled back: by the client's rollback tool, or because
    its session ended or was lost (no word for its lease) under ``on_end: compensate``."""

    code = "session_ended"


class EvidenceUnavailable(SagacityError):
    """A signing key, checkpoint directory or bundle cannot be used; the message says which and why."""

    code = "evidence_unavailable"


class RetentionRefused(SagacityError):
    """Retention would purge evidence it must keep (period too short, or the export did not verify)."""

    code = "retention_refused"


class DevStackError(SagacityError):
    """A service of the embedded dev stack could not start; the message says where its log is."""

    code = "devstack"


class LogInconsistent(SagacityError):
    """The transparency log's stored tree disagrees with a tree head it published; the
    sequencer refuses to sign over it (the message names the head and what differs)."""

    code = "log_inconsistent"


class WitnessRefused(SagacityError):
    """A witness will not cosign a tree head (C2SP tlog-witness): ``status`` is the HTTP status
    it answers with, ``size`` the tree size it holds when that is the reason (409)."""

    code = "witness_refused"

    def __init__(self, status: int, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.size = size


class ConversationTampered(SagacityError):
    """A stored agent conversation does not hash to the version the workflow holds."""

    code = "conversation_tampered"


class PayloadUnreadable(SagacityError):
    """An encrypted Temporal payload does not decrypt with the key it names: altered, or sealed
    under another key of that id. Nothing reads it; the workflow task or activity fails and is
    retried."""

    code = "payload_unreadable"


class CodecKeyMissing(PayloadUnreadable):
    """A Temporal payload is encrypted with a codec key this process does not hold.

    The workflow task (or activity) fails and Temporal retries it; it goes on once the key is
    added to ``SAGACITY_CODEC_KEYS`` (after the key that encrypts).
    """

    code = "codec_key_missing"


class DecodeNotAllowed(SagacityError):
    """The codec server's caller is authenticated but not listed in ``SAGACITY_CODEC_DECODERS``."""

    code = "decode_not_allowed"


class PayloadTooLarge(SagacityError):
    """A value is too large for Temporal's history (2 MiB a payload, 4 MiB a request by default):
    refused where it would enter it, before anything is journaled or run. Never retried: the
    same value is as large the next time. The saga goes on, and can still be aborted."""

    code = "payload_too_large"

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit
