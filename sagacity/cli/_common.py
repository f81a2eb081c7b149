"""What several command groups share."""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import TypeAdapter, ValidationError

from sagacity.errors import InvalidInput, SagacityError, SettingsError
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import ANY_PRINCIPAL, Keyring, Signer
from sagacity.evidence.keys import verifying_key
from sagacity.settings import Settings, dev_stack_hint, load_settings

T = TypeVar("T")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Say ``message`` on stderr; the exit to raise (2: usage or settings)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def duration_or_exit(option: str, text: str) -> timedelta:
    """``text`` (an ISO 8601 duration such as P183D or PT2H, or seconds) read for ``option``,
    or exit 2 saying what to give."""
    try:
        return TypeAdapter(timedelta).validate_python(text)
    except ValidationError:
        raise fail(
            f"{option} {text!r}: give an ISO 8601 duration (P183D, PT2H) or seconds"
        ) from None


def configured_checkpoints(settings: Settings) -> CheckpointDir | None:
    """The checkpoint folder the settings name, with the key to check it with (the public key,
    or the signing key's half); None when none is named. :class:`SettingsError` when its key is
    missing or unreadable: a folder nobody can check would weaken every verdict unseen."""
    if settings.checkpoint_dir is None:
        return None
    key = verifying_key(settings.checkpoint_public_key, settings.signing_key)
    if key is None:
        raise SettingsError(
            "checkpoints need a key: set SAGACITY_CHECKPOINT_PUBLIC_KEY or SAGACITY_SIGNING_KEY"
        )
    return CheckpointDir(settings.checkpoint_dir, key)


def checkpoints_or_exit(settings: Settings) -> CheckpointDir | None:
    """:func:`configured_checkpoints`, or exit 2 saying what is wrong."""
    try:
        return configured_checkpoints(settings)
    except SagacityError as exc:
        raise fail(str(exc)) from None


def settings_or_exit() -> Settings:
    """The settings, or exit 2 saying what is wrong with them."""
    try:
        return load_settings()
    except SagacityError as exc:
        raise fail(str(exc)) from None


def run_or_exit(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; bad input exits 2, any other Sagacity error (unreachable database, refused
    statement) 1, each with one line on stderr.
    """
    try:
        return asyncio.run(work)
    except InvalidInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def decision_keys_or_exit(
    key: Path | None, settings: Settings
) -> tuple[Signer | None, Keyring | None]:
    """The key decisions are signed with (``key``) and the keyring, or exit 2 if unreadable."""
    try:
        return (Signer.open(key) if key is not None else None), settings.load_keyring()
    except SagacityError as exc:
        raise fail(str(exc)) from None


def service_settings_or_exit() -> Settings:
    """Settings with a journal database and a Temporal address, or exit 2 saying what is missing."""
    settings = settings_or_exit()
    missing = [
        name
        for name, value in (
            ("SAGACITY_DATABASE_URL", settings.database_url),
            ("TEMPORAL_ADDRESS", settings.temporal_address),
        )
        if not value
    ]
    if missing:
        raise fail(f"set {' and '.join(missing)} {dev_stack_hint(settings.data_dir)}")
    return settings


def signing_identity(signer: Signer | None, keyring: Keyring | None) -> str:
    """Who a command acts as when ``--as`` is not given: the one identity the keyring lets the
    signing key sign for, else the user name of the login."""
    entry = keyring.find(signer.key_id) if keyring and signer else None
    if entry is not None and len(entry.principals) == 1 and entry.principals[0] != ANY_PRINCIPAL:
        return entry.principals[0]
    return getpass.getuser()
