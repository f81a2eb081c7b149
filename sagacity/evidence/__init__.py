"""Evidence: signed checkpoints of chain heads, export bundles, offline verification, redaction.

Names here load their module on first use (PEP 562), so importing one submodule, say
:mod:`sagacity.evidence.redaction` from code that runs near workflows, pulls in nothing else.
Nothing listed needs a database or Temporal; the parts that do are
:mod:`sagacity.evidence.anchors` (verify the live journal against its anchors) and
:mod:`sagacity.evidence.retention` (export, then purge).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagacity.evidence.bundle import BundleReport, BundleVerifier, verify_bundle
    from sagacity.evidence.checkpoints import (
        Checkpoint,
        CheckpointDir,
        CheckpointLog,
        CheckpointWriter,
    )
    from sagacity.evidence.export import export_bundle
    from sagacity.evidence.keys import (
        generate_fingerprint_key,
        generate_key,
        key_id,
        load_fingerprint_key,
        load_private_key,
        load_public_key,
    )
    from sagacity.evidence.redaction import (
        DEFAULT_RULES,
        Action,
        FingerprintKey,
        Redacted,
        Redactor,
        Rule,
    )
    from sagacity.evidence.report import Agreement, AnchorCheck, SagaReport, Source

_HOME = {
    "bundle": ("BundleReport", "BundleVerifier", "verify_bundle"),
    "export": ("export_bundle",),
    "checkpoints": ("Checkpoint", "CheckpointDir", "CheckpointLog", "CheckpointWriter"),
    "keys": (
        "generate_fingerprint_key",
        "generate_key",
        "key_id",
        "load_fingerprint_key",
        "load_private_key",
        "load_public_key",
    ),
    "redaction": ("DEFAULT_RULES", "Action", "FingerprintKey", "Redacted", "Redactor", "Rule"),
    "report": ("Agreement", "AnchorCheck", "SagaReport", "Source"),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}

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
    "FingerprintKey",
    "Redacted",
    "Redactor",
    "Rule",
    "SagaReport",
    "Source",
    "export_bundle",
    "generate_fingerprint_key",
    "generate_key",
    "key_id",
    "load_fingerprint_key",
    "load_private_key",
    "load_public_key",
    "verify_bundle",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
