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
from temporalio.client import Client

from sagacity.errors import InvalidInput, SagacityError, SettingsError
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import ANY_PRINCIPAL, Keyring, Signer
from sagacity.evidence.keys import load_public_key
from sagacity.evidence.rotation import trusted_keys
from sagacity.evidence.trust import TrustRoots, fingerprint, load_trust, worker_writable
from sagacity.settings import Settings, dev_stack_hint, load_settings
from sagacity.worker import connect_client

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


#: What to do when no trust root is found, said by every command that needs one.
PIN_A_KEY = (
    "pin the keys you trust out of band: a trust file (SAGACITY_TRUST_FILE or --trust; "
    "`sagacity dev` writes one and prints its path), a public key kept apart from the workers' "
    "folders (--public-key), or the key's fingerprint (--fingerprint)"
)


def _pinned_apart(what: str, path: Path, folders: list[Path]) -> None:
    inside = worker_writable(path, folders)
    if inside is not None:
        raise SettingsError(
            f"{what} {path} lies in {inside}, beside the data it would vouch for (a folder the "
            "workers write, or the bundle itself): whoever can write there can swap the key and "
            f"re-sign, so it is no trust root; {PIN_A_KEY}"
        )


def _by_fingerprint(wanted: str, candidates: list[Path]) -> TrustRoots:
    digits = wanted.strip().lower()
    if len(digits) < 16 or any(c not in "0123456789abcdef" for c in digits):
        raise SettingsError(
            f"--fingerprint {wanted!r}: give the key's fingerprint, at least 16 hex digits of "
            "SHA-256 over its raw bytes (as `sagacity dev` and `sagacity keygen` print it)"
        )
    for path in candidates:
        if not path.is_file():
            continue
        key = load_public_key(path)
        if fingerprint(key).startswith(digits):
            return TrustRoots.of_key(key, name=f"fingerprint {digits}", source=path)
    found = ", ".join(str(p) for p in candidates if p.is_file()) or "no key at all"
    raise SettingsError(f"no key with fingerprint {digits} was found (looked at {found})")


def trust_roots(
    settings: Settings,
    *,
    trust_file: Path | None = None,
    public_key: Path | None = None,
    pinned_fingerprint: str | None = None,
    candidates: tuple[Path, ...] = (),
    beside: tuple[Path, ...] = (),
) -> TrustRoots | None:
    """The keys a verifier trusts, pinned out of band, never found beside the data.

    In order: ``--trust FILE``, ``--public-key FILE``, ``--fingerprint HEX`` (matched against the
    keys in ``candidates``, the settings' public key and the signing key's public half), then
    ``SAGACITY_TRUST_FILE``, then ``SAGACITY_CHECKPOINT_PUBLIC_KEY``; None when none is given. A
    trust file or key lying in a folder the workers write (or in ``beside``, such as the bundle
    being verified) is refused with :class:`SettingsError`: whoever writes there can swap it.
    """
    if trust_file is not None and public_key is not None:
        raise SettingsError("give --trust or --public-key, not both")
    folders = [*settings.worker_folders(), *beside]
    if pinned_fingerprint is not None:
        if trust_file is not None:
            raise SettingsError("give --trust or --fingerprint, not both")
        keys = [
            *([public_key] if public_key is not None else []),
            *candidates,
            *([settings.checkpoint_public_key] if settings.checkpoint_public_key else []),
            *([settings.signing_key] if settings.signing_key else []),
        ]
        return _by_fingerprint(pinned_fingerprint, keys)
    if trust_file is not None:
        _pinned_apart("the trust file", trust_file, folders)
        return load_trust(trust_file)
    if public_key is not None:
        _pinned_apart("the public key", public_key, folders)
        return TrustRoots.of_key(load_public_key(public_key), source=public_key)
    if settings.trust_file is not None:
        _pinned_apart("SAGACITY_TRUST_FILE", settings.trust_file, folders)
        return load_trust(settings.trust_file)
    if settings.checkpoint_public_key is not None:
        _pinned_apart("SAGACITY_CHECKPOINT_PUBLIC_KEY", settings.checkpoint_public_key, folders)
        key = load_public_key(settings.checkpoint_public_key)
        return TrustRoots.of_key(key, source=settings.checkpoint_public_key)
    return None


def trusted_checkpoints(folder: Path, roots: TrustRoots) -> tuple[CheckpointDir, list[str]]:
    """``folder`` read trusting ``roots``' signers and the keys they rotated to (statements in
    its ``keys/rotations.jsonl``); and what was wrong with those statements."""
    keys, problems = trusted_keys(roots.signer_keys(), folder)
    return CheckpointDir(folder, keys), problems


def configured_checkpoints(settings: Settings) -> CheckpointDir | None:
    """The checkpoint folder the settings name, checked with the pinned trust roots; None when
    no folder is named. :class:`SettingsError` when no trust root is pinned (or one lies in the
    workers' folders): a folder checked against a key found beside it would weaken every verdict
    unseen."""
    if settings.checkpoint_dir is None:
        return None
    roots = trust_roots(settings)
    if roots is None:
        raise SettingsError(f"checkpoints need a trust root: {PIN_A_KEY}")
    return trusted_checkpoints(settings.checkpoint_dir, roots)[0]


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


async def temporal_client(settings: Settings) -> Client:
    """A client of the configured Temporal (with the deployment's payload codec); a
    :class:`SagacityError` saying why when none is configured or it cannot be reached."""
    try:
        return await connect_client(settings)
    except RuntimeError as exc:  # the SDK's "Failed client connect: …"
        raise SagacityError(
            f"cannot reach Temporal at {settings.temporal_address}: {exc}"
        ) from None
