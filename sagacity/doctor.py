"""The production posture: the settings and grants that silently weaken Sagacity's guarantees.

:func:`diagnose` reads the settings as a worker reads them and asks Postgres what the worker's
login may do, and returns a :class:`Finding` for each weakness, with its fix. It sits beside
:mod:`sagacity.settings` and :mod:`sagacity.devstack`, above the evidence and store layers it
asks; ``sagacity doctor`` prints it.

Checking can fail (a key file that cannot be read, a database that cannot be reached): that
raises the :class:`~sagacity.errors.SagacityError` met, never a finding, so "clean" always means
every check ran.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.retention import MIN_RETENTION
from sagacity.evidence.trust import worker_writable
from sagacity.settings import Settings
from sagacity.store.db import keepalives_off, open_pool
from sagacity.store.halts import HaltStore
from sagacity.store.retention import RETENTION_ROLE, RetentionStore
from sagacity.store.roles import JournalRights, append_only_rights, placement

__all__ = ["Check", "Diagnosis", "Finding", "Severity", "check_settings", "diagnose"]


class Severity(StrEnum):
    """How much a finding weakens: ``error`` loses a guarantee, ``warning`` narrows one."""

    ERROR = "error"
    WARNING = "warning"


class Check(StrEnum):
    """The id of each finding, stable across releases."""

    WRITABLE_JOURNAL = "writable_journal"
    ANCHORS_OFF = "anchors_off"
    TRANSPARENCY_LOG_OFF = "transparency_log_off"
    KEYRING_MISSING = "keyring_missing"
    REDACTION_OFF = "redaction_off"
    REDACTION_DEFAULTS_OFF = "redaction_defaults_off"
    CODEC_OFF = "codec_off"
    POOL_KEEPALIVES_OFF = "pool_keepalives_off"
    OUTAGE_WINDOW_OFF = "outage_window_off"
    RETENTION_TOO_SHORT = "retention_too_short"
    RETENTION_ROLE_MISSING = "retention_role_missing"
    RETENTION_OVERDUE = "retention_overdue"
    HALT_GATE_MISMATCH = "halt_gate_mismatch"
    HALT_TRIGGER_OFF = "halt_trigger_off"
    TRUST_ROOT_WRITABLE = "trust_root_writable"
    SHADOWED_JOURNAL = "shadowed_journal"


@dataclass(frozen=True, slots=True)
class Finding:
    """One weakness: what it is and what to do about it."""

    id: Check
    severity: Severity
    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {
            "id": self.id.value,
            "severity": self.severity.value,
            "what": self.what,
            "fix": self.fix,
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Everything :func:`diagnose` found; clean when ``findings`` is empty."""

    #: the role the worker's database URL logs in as
    role: str
    findings: list[Finding]

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, object]:
        return {
            "clean": self.clean,
            "role": self.role,
            "findings": [f.to_dict() for f in self.findings],
        }


def check_settings(settings: Settings) -> list[Finding]:
    """The findings the settings alone show (the configured key files are read).

    :class:`~sagacity.errors.SettingsError` or :class:`~sagacity.errors.EvidenceUnavailable`
    when a configured key or keyring cannot be read: a worker would not start either.
    """
    found: list[Finding] = []
    if CheckpointWriter.open(settings.checkpoint_dir, settings.signing_key) is None:
        found.append(
            Finding(
                Check.ANCHORS_OFF,
                Severity.ERROR,
                "no checkpoints: workers sign no chain heads, so whoever owns the database can "
                "rewrite a saga, recompute its chain and go unnoticed",
                "set SAGACITY_SIGNING_KEY (`sagacity keygen signing-key.pem`) and "
                "SAGACITY_CHECKPOINT_DIR, on storage the database's owners cannot reach",
            )
        )
    elif settings.log_interval <= timedelta(0):
        found.append(
            Finding(
                Check.TRANSPARENCY_LOG_OFF,
                Severity.WARNING,
                "SAGACITY_LOG_INTERVAL is 0: workers add no rows to the transparency log, so no "
                "signed tree head fixes the journal as a whole",
                "unset SAGACITY_LOG_INTERVAL (10 s) or give it a positive duration",
            )
        )
    if settings.load_keyring() is None:
        found.append(
            Finding(
                Check.KEYRING_MISSING,
                Severity.ERROR,
                "no decision keyring: approvals are taken unsigned, so anyone who can reach "
                "Temporal can approve a call as anyone",
                "set SAGACITY_KEYRING (`sagacity keyring init FOLDER --approver NAME`)",
            )
        )
    if not settings.redactor().rules:
        found.append(
            Finding(
                Check.REDACTION_OFF,
                Severity.ERROR,
                "no redaction rules: secrets in tool arguments and results (api_key, token, "
                "password …) are journaled as they are",
                "unset SAGACITY_REDACT_DEFAULTS (true), or give rules in SAGACITY_REDACT",
            )
        )
    elif not settings.redact_defaults:
        found.append(
            Finding(
                Check.REDACTION_DEFAULTS_OFF,
                Severity.WARNING,
                "SAGACITY_REDACT_DEFAULTS is false: only SAGACITY_REDACT's fields are redacted, "
                "not the built-in api_key, token, password, secret …",
                "unset SAGACITY_REDACT_DEFAULTS (true); your rules still come first",
            )
        )
    if settings.payload_codec() is None:
        found.append(
            Finding(
                Check.CODEC_OFF,
                Severity.ERROR,
                "no payload codec keys: tool arguments, results and approval inputs reach "
                "Temporal's history in clear",
                'set SAGACITY_CODEC_KEYS (echo "k1=$(openssl rand -base64 32)") or '
                "SAGACITY_CODEC_KEYS_FILE, the same keys in every process",
            )
        )
    if settings.outage_window <= timedelta(0):
        found.append(
            Finding(
                Check.OUTAGE_WINDOW_OFF,
                Severity.ERROR,
                "SAGACITY_OUTAGE_WINDOW is 0: a journal write meeting a Postgres restart fails at "
                "once instead of waiting for the pool to reconnect, and calls turn SUSPECT",
                "unset SAGACITY_OUTAGE_WINDOW (10 minutes) or give it the longest outage to ride out",
            )
        )
    found.extend(_trust_roots(settings))
    if settings.retention_period < MIN_RETENTION:
        found.append(
            Finding(
                Check.RETENTION_TOO_SHORT,
                Severity.ERROR,
                f"SAGACITY_RETENTION_PERIOD is {settings.retention_period.days} days, under the "
                f"{MIN_RETENTION.days}-day minimum: `sagacity export --purge` refuses to run",
                f"set SAGACITY_RETENTION_PERIOD to at least P{MIN_RETENTION.days}D",
            )
        )
    return found


def _trust_roots(settings: Settings) -> list[Finding]:
    """A trust root (trust file, pinned public key) that the workers, or anyone but its owner,
    can write: whoever writes it swaps the key verifiers accept and re-signs."""
    folders = settings.worker_folders()
    found = []
    for name, path in (
        ("SAGACITY_TRUST_FILE", settings.trust_file),
        ("SAGACITY_CHECKPOINT_PUBLIC_KEY", settings.checkpoint_public_key),
    ):
        if path is None:
            continue
        inside = worker_writable(path, folders)
        loose = [p for p in (path, path.parent) if _others_may_write(p)]
        if inside is None and not loose:
            continue
        where = (
            f"lies in {inside}, a folder the workers write"
            if inside is not None
            else f"is writable by others than its owner ({', '.join(map(str, loose))})"
        )
        found.append(
            Finding(
                Check.TRUST_ROOT_WRITABLE,
                Severity.ERROR,
                f"{name} {path} {where}: whoever can write it can swap the key verifiers trust "
                "and re-sign rewritten sagas",
                "keep trust files and pinned keys on storage the workers and the database's "
                "owners cannot write (read-only for verifiers: deploy/ mounts it so), mode 0444 "
                "in a folder only its owner writes",
            )
        )
    return found


def _others_may_write(path: Path) -> bool:
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWGRP | stat.S_IWOTH)) and not mode & stat.S_ISVTX


async def diagnose(settings: Settings, database_url: str) -> Diagnosis:
    """Every finding: :func:`check_settings`, then what the worker's login (``database_url``)
    may do, its pool's connection settings, and retention in that database.

    :class:`~sagacity.errors.InvalidInput` when ``database_url`` does not parse;
    :class:`~sagacity.errors.StoreUnavailable` when the database cannot be reached or is not
    migrated."""
    found = check_settings(settings)
    no_keepalives = keepalives_off(database_url)  # a URL that does not parse is bad input
    rights = await append_only_rights(database_url)
    writable = _writable(rights)
    if writable is not None:
        found.append(writable)
    place = await placement(database_url)
    if place.shadows or (place.creators and writable is None):
        found.append(
            Finding(
                Check.SHADOWED_JOURNAL,
                Severity.ERROR,
                "; ".join(place.describe()) + ": workers refuse to start",
                "drop the shadows and revoke CREATE on the journal's schema as said",
            )
        )
    if no_keepalives:
        found.append(
            Finding(
                Check.POOL_KEEPALIVES_OFF,
                Severity.WARNING,
                "the database URL sets keepalives=0: a connection whose server vanished without "
                "closing it (a host crash, a partition) looks alive to the pool's check and hangs "
                "the call that gets it",
                "drop keepalives=0 from SAGACITY_DATABASE_URL (add keepalives_idle=30 to notice "
                "sooner)",
            )
        )
    pool = await open_pool(database_url, min_size=1, max_size=1)
    try:
        retention = RetentionStore(pool)
        if not await retention.role_can_purge():
            found.append(
                Finding(
                    Check.RETENTION_ROLE_MISSING,
                    Severity.ERROR,
                    f"no role {RETENTION_ROLE} with DELETE on the journal: `sagacity export "
                    "--purge` cannot delete, so sagas are kept past the retention period",
                    f"CREATE ROLE {RETENTION_ROLE} NOLOGIN (needs CREATEROLE; `sagacity db "
                    "migrate` skipped it without), then as the tables' owner GRANT SELECT, "
                    f"DELETE ON side_effect_journal TO {RETENTION_ROLE}",
                )
            )
        cutoff = datetime.now(UTC) - settings.retention_period
        overdue = await retention.count_expired(cutoff)
        halts = HaltStore(pool)
        in_force = {h.id for h in await halts.list(active=True, limit=10_000)}
        enforced = await halts.enforced()
        gate_on = await halts.gate_on()
    finally:
        await pool.close()
    if not gate_on:
        found.append(
            Finding(
                Check.HALT_TRIGGER_OFF,
                Severity.ERROR,
                "the journal's trigger sagacity_intent_gate is missing or disabled: no INTENT is "
                "checked against the halts, so a halt stops no call",
                "as the tables' owner: ALTER TABLE side_effect_journal ENABLE TRIGGER "
                "sagacity_intent_gate; if it was dropped, delete the row 0009_halt_trigger from "
                "sagacity_schema_version and run `sagacity db migrate` (it recreates it)",
            )
        )
    if in_force != enforced:
        found.append(
            Finding(
                Check.HALT_GATE_MISMATCH,
                Severity.ERROR,
                f"the halt gate enforces halts {sorted(enforced) or 'none'} while halts "
                f"{sorted(in_force) or 'none'} are in force: the gate row was changed behind "
                "`sagacity halt`, so a halt refuses nothing or a lifted one still refuses",
                "halt again, or lift and re-halt, with `sagacity halt` / `resume` (each "
                "rewrites the gate from the halts in force)",
            )
        )
    if overdue:
        found.append(
            Finding(
                Check.RETENTION_OVERDUE,
                Severity.WARNING,
                f"{overdue} sagas idle longer than SAGACITY_RETENTION_PERIOD "
                f"({settings.retention_period.days} days) are still in the journal: no retention "
                "runs",
                f"schedule `sagacity export --purge --out FOLDER` as a login in {RETENTION_ROLE} "
                "(a cron job), and keep the bundles it writes",
            )
        )
    return Diagnosis(rights[0].role, found)


def _writable(rights: list[JournalRights]) -> Finding | None:
    """One finding naming every append-only table the login may rewrite, and how."""
    loose = [r for r in rights if not r.append_only]
    if not loose:
        return None
    what = (
        f"role {loose[0].role} is a superuser: it may UPDATE, DELETE and TRUNCATE the journal "
        "and every append-only table"
        if loose[0].superuser
        else "; ".join(r.describe() for r in loose)
    )
    return Finding(
        Check.WRITABLE_JOURNAL,
        Severity.ERROR,
        f"{what}: edits through the worker's login are caught only by the anchors",
        "log workers in as sagacity_app (`sagacity db grants`), never as the tables' owner "
        "or a superuser; revoke what it holds beyond INSERT and SELECT",
    )
