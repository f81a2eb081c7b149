"""The ``workflow.patched`` ids the saga engine checks, each with why it exists.

Sagas whose history predates a marker replay the old behaviour; new sagas take the new one
(see docs/versioning.md). ``tests/temporal/replay.py`` lists them for the replay corpus.
"""

#: sagas from before this marker only fetched the tool catalog: they did not claim their id's
#: journal, nor read rows another run had written
OPEN_PATCH = "sagacity-open-saga"
#: sagas from before this marker made again a call whose effect they read back from a redacted
#: journal row (after a reset): the row could not equal the call's real input
ADOPT_REDACTED_PATCH = "sagacity-adopt-redacted"
#: sagas from before this marker journaled an abort during an approval wait as a plain rejection
#: (``{"by", "reason"}``, ``by`` as the sender claimed it)
ABORT_ROW_PATCH = "sagacity-abort-row"
#: sagas from before this marker journaled a decision row with the input the workflow holds
#: (redacted by the approval gate's rules rather than copied from the request), and an abort's
#: row with the signing key's id only, not the signature that proves it
BOUND_ROWS_PATCH = "sagacity-decision-rows-bound"
#: sagas from before this marker obeyed any ``halt`` signal with policy ``compensate``, unproven,
#: in the name it gave, and also while they compensated after a failure
HALT_CHECK_PATCH = "sagacity-halt-checked"
#: sagas from before this marker took a result read back from the journal as it stood: a
#: resolution's ``{"resolved_by", "result"}`` for the result, markers in place of the values
JOURNALED_RESULTS_PATCH = "sagacity-journaled-results"
#: sagas from before this marker ran the calls queued behind the lock (parallel tool calls)
#: when the saga began to compensate meanwhile, only to undo them
QUEUED_CALLS_PATCH = "sagacity-no-calls-once-compensating"
#: sagas from before this marker scheduled a call whatever the size of its arguments (one over
#: Temporal's limits failed the workflow task for ever); marked only when a call is refused
PAYLOAD_LIMIT_PATCH = "sagacity-payload-limit"
#: sagas from before this marker judged a ``decide`` update in its validator: a refused one was
#: not recorded in ``refused_decisions``; now the handler judges it, records a refusal and fails
DECIDE_RECORDED_PATCH = "sagacity-decide-recorded"
#: sagas from before this marker went on past a rollback's row (a reset of a rolled-back run):
#: they made calls again, on effects the rollback had undone
ROLLED_BACK_PATCH = "sagacity-rolled-back-ends"
#: sagas from before this marker read an unsigned {"resolved_by", "result"} row another run
#: wrote as a resolution; resolutions now carry "$resolution", and that shape is a tool's result
RESOLUTION_MARK_PATCH = "sagacity-resolution-marked"
#: sagas from before this marker opened their journal (claimed it, read the catalog) in a local
#: activity before their first call; a new steps saga now opens it in its first call's activity
OPEN_IN_CALL_PATCH = "sagacity-open-in-first-call"
