"""``sagacity log`` (the transparency log: integrate, head, verify) and ``sagacity prove``.

Exit status: 0 verified, 1 something failed (the report names it) or a proof bundle is STALE
(older than ``--not-older-than``, or a ``--checkpoint`` shows the log has grown past its head),
2 usage, settings or an unreachable database; ``prove --check`` without the trusted key: 3
(UNTRUSTED).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.cli._common import (
    PIN_A_KEY,
    duration_or_exit,
    fail,
    settings_or_exit,
    trust_roots,
    trusted_checkpoints,
)
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.attest import UNATTESTED, Attestor
from sagacity.evidence.keys import load_private_key, load_public_key
from sagacity.evidence.logverify import LogFinding, LogVerifier
from sagacity.evidence.note import NoteKey
from sagacity.evidence.proofs import check_proof_bundle
from sagacity.evidence.rotation import trusted_keys
from sagacity.evidence.tlog import HeadLog, Integration, Sequencer, prove_saga
from sagacity.evidence.trust import TrustRoots
from sagacity.evidence.witness_check import witness_findings
from sagacity.settings import Settings
from sagacity.store.db import open_pool
from sagacity.store.journal import JournalStore
from sagacity.store.tlog import TlogStore

__all__ = ["app", "prove"]

app = typer.Typer(
    name="log",
    help="The transparency log across all sagas: signed tree heads, consistency, proofs.",
    no_args_is_help=True,
)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Postgres URL of the journal (default: SAGACITY_DATABASE_URL).",
        show_default=False,
    ),
]
CheckpointDir = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint-dir",
        help="Where tree heads are published, under tlog/ (default: SAGACITY_CHECKPOINT_DIR).",
        show_default=False,
    ),
]
PublicKey = Annotated[
    Path | None,
    typer.Option(
        "--public-key",
        help="The log's public key (default: the first signer of SAGACITY_TRUST_FILE, else "
        "SAGACITY_CHECKPOINT_PUBLIC_KEY); never one in the folders the workers write.",
        show_default=False,
    ),
]
Grace = Annotated[
    float,
    typer.Option(
        "--grace",
        help="Seconds a journal row may wait for the log (for the checkpoint that attests it, "
        "or a sequencer pass) before it counts as unattested or withheld.",
    ),
]
TrustFile = Annotated[
    Path | None,
    typer.Option(
        "--trust",
        help="Trust file pinning the log's key, the witnesses and how many must cosign a tree "
        "head (default: SAGACITY_TRUST_FILE).",
        show_default=False,
    ),
]


def _roots(
    settings: Settings, *, trust: Path | None = None, public_key: Path | None = None
) -> TrustRoots | None:
    """The trust roots in use (:func:`trust_roots`): their witnesses are the ones asked and
    checked, their quorum the one required."""
    try:
        return trust_roots(settings, trust_file=trust, public_key=public_key)
    except SagacityError as exc:
        raise fail(str(exc)) from None


def _folder(given: Path | None, settings: Settings) -> Path:
    folder = given or settings.checkpoint_dir
    if folder is None:
        raise fail("no checkpoint directory: set SAGACITY_CHECKPOINT_DIR or pass --checkpoint-dir")
    return folder


def _public_key(given: Path | None, settings: Settings) -> Ed25519PublicKey:
    """The log's key as pinned out of band (--public-key, else the trust file's first signer)."""
    return _pinned(_roots(settings, public_key=given)).signers[0].key


def _pinned(roots: TrustRoots | None) -> TrustRoots:
    if roots is None:
        raise fail(f"no key to check tree heads with: {PIN_A_KEY}")
    return roots


@app.command("integrate")
def integrate(
    database_url: DatabaseUrl = None,
    checkpoint_dir: CheckpointDir = None,
    full_check: Annotated[
        bool,
        typer.Option(
            "--full-check", help="Recompute every stored leaf against the last head first."
        ),
    ] = False,
    origin: Annotated[
        str | None,
        typer.Option(
            "--origin",
            help="The log's name in a first head (default: sagacity.local/journal/<database>).",
            show_default=False,
        ),
    ] = None,
    grace: Grace = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    trust: TrustFile = None,
) -> None:
    """Append the attested journal rows the log lacks and publish a signed tree head (one
    pass), asking the trust file's witnesses to cosign it; exit 1 when a witness refuses.

    A row no checkpoint signed by the log's key covers is not appended: within the grace period
    it waits for a later pass, past it it is named as unattested (exit 1).
    """
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    folder = _folder(checkpoint_dir, settings)
    if settings.signing_key is None:
        raise fail("no signing key: set SAGACITY_SIGNING_KEY")
    roots = _roots(settings, trust=trust)

    async def run() -> Integration:
        key = load_private_key(settings.signing_key) if settings.signing_key else None
        assert key is not None
        pool = await open_pool(url, min_size=1, max_size=3)
        try:
            witnesses = () if roots is None else roots.witnesses
            signers = None if roots is None else trusted_keys(roots.signer_keys(), folder)[0]
            sequencer = Sequencer(
                TlogStore(pool),
                folder,
                key,
                origin=origin,
                witnesses=witnesses,
                signers=signers,
                grace=timedelta(seconds=grace),
            )
            return await sequencer.integrate(full_check=full_check)
        finally:
            await pool.close()

    try:
        done = asyncio.run(run())
    except SagacityError as exc:
        raise fail(str(exc), 1) from None
    witnessing = done.witnessing
    alerts = [] if witnessing is None else witnessing.alerts()
    if as_json:
        result: dict[str, object] = {
            "appended": done.appended,
            "size": done.size,
            "published": done.published is not None,
            "waiting": done.waiting,
            "unattested": done.unattested,
            "named": [{"saga_id": r.saga_id, "seq": r.seq} for r in done.named],
        }
        if witnessing is not None:
            result |= {
                "cosigned": witnessing.cosigned,
                "refused": witnessing.refused,
                "unreachable": witnessing.unreachable,
            }
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        _integrated(done)
    if witnessing is not None:
        for line in alerts:
            typer.echo(f"error: {line}", err=True)
        for line in witnessing.warnings():
            typer.echo(f"warning: {line}", err=True)
    if alerts or done.unattested:
        raise typer.Exit(1)


def _integrated(done: Integration) -> None:
    """What a pass did, as lines: unattested rows first (FAILED), then the head, then rows that
    wait for their checkpoint."""
    for row in done.named:
        typer.echo(f"FAILED  saga {row.saga_id!r} seq {row.seq}: not logged: {UNATTESTED}")
    if done.unattested > len(done.named):
        typer.echo(f"FAILED  {done.unattested - len(done.named)} more unattested rows")
    witnessing = done.witnessing
    if done.published is not None:
        by = f", cosigned by {', '.join(witnessing.cosigned) or 'no witness'}" if witnessing else ""
        typer.echo(f"{done.appended} rows appended; published tree head {done.size}{by}")
    else:
        typer.echo(f"nothing new; the log holds {done.size} leaves")
    if done.waiting:
        typer.echo(f"{done.waiting} rows wait for a signed checkpoint (within the grace period)")


@app.command("head")
def head(checkpoint_dir: CheckpointDir = None, public_key: PublicKey = None) -> None:
    """Print the latest published tree head (a signed C2SP checkpoint) and the log's key."""
    settings = settings_or_exit()
    key = _public_key(public_key, settings)
    latest = HeadLog(_folder(checkpoint_dir, settings), key).latest()
    if latest is None:
        raise fail("no tree head published yet: run `sagacity log integrate`", 1)
    typer.echo(latest.note, nl=False)
    typer.echo(f"\nverifier key: {NoteKey(latest.head.origin, key).vkey()}", err=True)


@app.command("verify")
def verify(
    database_url: DatabaseUrl = None,
    checkpoint_dir: CheckpointDir = None,
    public_key: PublicKey = None,
    grace: Grace = 600.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per finding, then a summary.")
    ] = False,
    trust: TrustFile = None,
) -> None:
    """Recompute the log from its leaves and the journal; check every published head, and
    against the trust file's witnesses: the cosignature quorum, rollbacks and forks."""
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    roots = _pinned(_roots(settings, trust=trust, public_key=public_key))
    folder = _folder(checkpoint_dir, settings)
    heads = HeadLog(folder, roots.signers[0].key)
    # rows are attested by checkpoints of the pinned keys and the keys they rotated to
    checkpoints, _ = trusted_checkpoints(folder, roots)

    counts = {"failed": 0, "pending": 0, "warnings": 0}

    async def run() -> LogVerifier:
        def report(finding: LogFinding, warning: str = "pending") -> None:
            counts["failed" if finding.fatal else warning] += 1
            if as_json:
                typer.echo(
                    json.dumps(
                        {
                            "fatal": finding.fatal,
                            "saga_id": finding.saga_id,
                            "seq": finding.seq,
                            "detail": finding.detail,
                        },
                        ensure_ascii=False,
                    )
                )
            else:
                typer.echo(finding.line())

        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            store = TlogStore(pool)
            attestor = Attestor(JournalStore(pool), checkpoints)
            checker = LogVerifier(store, heads, attestor, timedelta(seconds=grace))
            async with aclosing(checker.run()) as findings:
                async for finding in findings:
                    report(finding)
            for finding in await witness_findings(roots, heads, store):
                report(finding, "warnings")
        finally:
            await pool.close()
        return checker

    try:
        checker = asyncio.run(run())
    except SagacityError as exc:
        raise fail(str(exc)) from None
    size = checker.latest.head.size if checker.latest else 0
    failed = counts["failed"]
    summary = {
        "ok": not failed,
        "leaves": checker.leaves,
        "heads": checker.checked_heads,
        "latest_head": size,
        **counts,
    }
    if as_json:
        typer.echo(json.dumps({"summary": summary}))
    else:
        verdict = "all verified" if not failed else f"{failed} failed"
        warned = f", {counts['warnings']:,} witness warnings" if counts["warnings"] else ""
        typer.echo(
            f"{checker.leaves:,} leaves, {checker.checked_heads:,} tree heads (latest {size:,}), "
            f"{counts['pending']:,} rows pending{warned}: {verdict}"
        )
    raise typer.Exit(1 if failed else 0)


def prove(
    saga: Annotated[
        str | None, typer.Argument(help="The saga to prove.", show_default=False)
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="New (or empty) folder for the proof bundle.", show_default=False
        ),
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(
            "--check", help="Verify this proof bundle offline instead.", show_default=False
        ),
    ] = None,
    public_key: PublicKey = None,
    witness: Annotated[
        list[str] | None,
        typer.Option(
            "--witness",
            help="With --check: NAME=PUBLIC_KEY_FILE of a witness whose cosignature is required.",
            show_default=False,
        ),
    ] = None,
    not_older_than: Annotated[
        str | None,
        typer.Option(
            "--not-older-than",
            help="With --check: refuse (STALE, exit 1) a bundle not fresh as of this long ago, "
            "ISO 8601 (P1D, PT2H) or seconds; only a trusted witness's cosignature dates it.",
            show_default=False,
        ),
    ] = None,
    newer: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="With --check: a newer signed tree head of the log (a note, or the log's "
            "checkpoints.jsonl); a bundle whose head it has grown past is STALE.",
            show_default=False,
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    checkpoint_dir: CheckpointDir = None,
    trust: TrustFile = None,
) -> None:
    """Write a saga's rows with inclusion proofs in the latest tree head, or check such a bundle."""
    if check is not None:
        if saga is not None or out is not None:
            raise fail("--check verifies a bundle; it takes no saga or --out")
        limit = (
            None if not_older_than is None else duration_or_exit("--not-older-than", not_older_than)
        )
        settings = settings_or_exit()
        roots = (
            None if trust is None and settings.trust_file is None else _roots(settings, trust=trust)
        )
        _check(check, public_key, witness or [], roots, limit, newer)
        return
    if not_older_than is not None or newer is not None:
        raise fail("--not-older-than and --checkpoint go with --check")
    if saga is None or out is None:
        raise fail("give a saga and --out DIR, or --check DIR")
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    heads = HeadLog(_folder(checkpoint_dir, settings), _public_key(public_key, settings))

    async def run() -> tuple[int, int, int]:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            proved = await prove_saga(JournalStore(pool), TlogStore(pool), heads, saga, out)
        finally:
            await pool.close()
        return proved.rows, proved.later, proved.head.size

    try:
        rows, later, size = asyncio.run(run())
    except SagacityError as exc:
        raise fail(str(exc), 1) from None
    typer.echo(f"{out}: {rows} rows of saga {saga!r}, each proved in tree head {size}")
    if later:
        typer.echo(
            f"warning: {later} later rows are not in tree head {size} yet "
            "(run `sagacity log integrate`, then prove again)",
            err=True,
        )


def _check(
    path: Path,
    public_key: Path | None,
    witnesses: list[str],
    trust: TrustRoots | None,
    not_older_than: timedelta | None,
    newer: Path | None,
) -> None:
    try:
        key = None if public_key is None else load_public_key(public_key)
        keys = []
        for item in witnesses:
            name, sep, file = item.partition("=")
            if not (sep and name and file):
                raise fail(f"--witness {item!r}: give NAME=PUBLIC_KEY_FILE")
            keys.append(NoteKey(name, load_public_key(Path(file)), 0x04))
        text = None if newer is None else newer.read_text(encoding="utf-8")
    except SagacityError as exc:
        raise fail(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"--checkpoint {newer}: {exc}") from None
    report = check_proof_bundle(
        path,
        key,
        keys,
        pool=[] if trust is None else [NoteKey(w.name, w.key, 0x04) for w in trust.witnesses],
        quorum=0 if trust is None else trust.witness_quorum,
        not_older_than=not_older_than,
        newer=text,
    )
    for problem in report.problems:
        typer.echo(f"FAILED  {problem}")
    verdict = report.verdict
    size = "?" if report.head is None else report.head.size
    origin = "?" if report.head is None else report.head.origin
    typer.echo(
        f"{verdict}: saga {report.saga_id!r}, {report.rows} rows in tree head {size} of {origin}"
    )
    for reason in report.stale:
        typer.echo(f"  - not current: {reason}")
    if report.freshness is not None:
        typer.echo(f"  {report.freshness.line()}")
    for note in report.notes:
        typer.echo(f"  note: {note}")
    if verdict == "UNTRUSTED":
        typer.echo(
            "the proofs hold, but nothing says who signed the tree head: pass --public-key "
            "with the log's published key",
            err=True,
        )
    raise typer.Exit(verdict.exit_code)
