"""Journal core: phases, rows, the hash chain and its verifier. Pure: no I/O."""

from sagacity.journal.calls import Call, read_calls, rolled_back
from sagacity.journal.canonical import input_hash, parse_json, to_json
from sagacity.journal.chain import GENESIS_HASH, canonical_bytes, entry_hash, format_timestamp, seal
from sagacity.journal.corrections import Correction, correction_payload, read_correction
from sagacity.journal.entry import Draft, Entry, check_draft, utc_micros
from sagacity.journal.phases import APPROVAL_GATE, ROLLBACK, Phase
from sagacity.journal.plan import Fate, Planned, RollbackPlan, rollback_plan, rolled_back_by
from sagacity.journal.results import JournaledResult, read_result
from sagacity.journal.verify import ChainVerifier, Dangling, Fault, Problem, Verdict, verify_rows

__all__ = [
    "APPROVAL_GATE",
    "GENESIS_HASH",
    "ROLLBACK",
    "Call",
    "ChainVerifier",
    "Correction",
    "Dangling",
    "Draft",
    "Entry",
    "Fate",
    "Fault",
    "JournaledResult",
    "Phase",
    "Planned",
    "Problem",
    "RollbackPlan",
    "Verdict",
    "canonical_bytes",
    "check_draft",
    "correction_payload",
    "entry_hash",
    "format_timestamp",
    "input_hash",
    "parse_json",
    "read_calls",
    "read_correction",
    "read_result",
    "rollback_plan",
    "rolled_back",
    "rolled_back_by",
    "seal",
    "to_json",
    "utc_micros",
    "verify_rows",
]
