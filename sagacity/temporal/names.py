"""Names shared by workflow code and the worker: activity types, and what approval refusals say."""

DESCRIBE_TOOLS = "sagacity.describe_tools"
OPEN_SAGA = "sagacity.open_saga"
CALL_TOOL = "sagacity.call_tool"
#: a new saga's first call, which opens its journal first: a name of its own, so that a worker
#: from before it (which would run the call unclaimed) never takes it
OPEN_AND_CALL = "sagacity.open_and_call"
COMPENSATE = "sagacity.compensate"
APPEND = "sagacity.append"
OPEN_APPROVAL = "sagacity.open_approval"
CLOSE_APPROVAL = "sagacity.close_approval"
#: an approver's edited arguments checked against the tool (a worker from before edits lacks it)
CHECK_EDIT = "sagacity.check_edit"
RESOLVE_CALL = "sagacity.resolve_call"
SEAL_SAGA = "sagacity.seal_saga"
VALIDATE_STEPS = "sagacity.validate_steps"
READ_HALT = "sagacity.read_halt"
#: notify the next tier of an approval request past its SLA (only sagas with an SLA run it)
ESCALATE_APPROVAL = "sagacity.escalate_approval"

VERIFICATION_REFUSED = "verification refused execution"
#: the error type of an update (``decide``, ``turn``, an MCP session's) a saga turns away while
#: a local activity of its runs (sent again, it is taken): accepted then, it could leave a
#: history that does not replay
SAGA_BUSY = "SagaBusy"
