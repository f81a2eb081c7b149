"""Evidence: signed checkpoints of chain heads, export bundles, offline verification, redaction.

What is imported here needs no database or Temporal (an offline verifier imports it). The parts
that do live in :mod:`sagacity.evidence.anchors` (verify the live journal against its anchors)
and :mod:`sagacity.evidence.retention` (export, then purge).
"""

from sagacity.evidence.bundle import BundleReport, BundleVerifier, export_bundle, verify_bundle
from sagacity.evidence.checkpoints import Checkpoint, CheckpointDir, CheckpointLog, CheckpointWriter
from sagacity.evidence.keys import generate_key, key_id, load_private_key, load_public_key
from sagacity.evidence.redaction import DEFAULT_RULES, Action, Redacted, Redactor, Rule
from sagacity.evidence.report import Agreement, AnchorCheck, SagaReport, Source

__all__ = [
    "DEFAULT_RULES",
    "Action",
    "Agreement",
    "AnchorCheck",
    "BundleReport",
    "BundleVerifier",
    "Checkpoint",
    "CheckpointDir",
    "CheckpointLog",
    "CheckpointWriter",
    "Redacted",
    "Redactor",
    "Rule",
    "SagaReport",
    "Source",
    "export_bundle",
    "generate_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "verify_bundle",
]
