"""``sagacity verify``: check sagas' hash chains against every anchor, live or from a bundle.

Live, the anchors are the signed checkpoints, the transparency log once it has a published tree
head (each saga's rows against its leaves, with no flag), Temporal (``--temporal``) and the
decision keyring.

Exit status: 0 every saga verified, 1 something is broken (the report says what, where, and which
anchor disagrees), 2 nothing could be verified (usage, settings, unreachable database), 3 a
bundle is UNTRUSTED: consistent, but no trusted key was given to check it with. A bundle without
anchors fails (1) unless ``--allow-unanchored``; so does (1, STALE) one that is not current: older
than ``--not-older-than``, or whose tree head a newer ``--checkpoint`` has grown past.

Warnings do not change it: a call whose INTENT has no outcome row after it (SUSPECT, or still
running), or a saga whose workflow ended with no seal in its checkpoints (``--temporal``), is
printed as ``WARNING  <saga> seq <n>: …`` and counted in the summary.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from temporalio.client import Client

from sagacity.cli._common import PIN_A_KEY, duration_or_exit, trust_roots, trusted_checkpoints
from sagacity.cli._exit import hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.attest import Attestor
from sagacity.evidence.bundle import PUBLIC_KEY, BundleVerdict, BundleVerifier, judge
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import Keyring, load_keyring
from sagacity.evidence.heads import stamp
from sagacity.evidence.logcheck import LogAnchor
from sagacity.evidence.report import AnchorCheck, SagaReport
from sagacity.evidence.tlog import HeadLog
from sagacity.evidence.trust import TrustRoots
from sagacity.evidence.witness_check import witness_findings
from sagacity.journal import parse_json
from sagacity.settings import Settings, load_settings
from sagacity.store.journal import JournalStore
from sagacity.store.tlog import TlogStore
from sagacity.worker import connect_client

__all__ = ["verify"]

#: Seconds between progress lines on stderr; runs shorter than this print none.
PROGRESS_EVERY = 2.0
#: What the summary calls each kind of warning.
WARNING_KINDS = {
    "dangling_intent": "calls whose outcome is unknown",
    "unsealed": "ended sagas with no seal",
    "unverified_decision": "aborts or halts nothing proves",
}


class Output:
    """Prints reports as they come (text or JSON lines) and keeps the tally."""

    def __init__(self, *, as_json: bool, verbose: bool) -> None:
        self.as_json = as_json
        self.verbose = verbose
        self.sagas = self.rows = self.failed = self.warnings = 0
        self.warning_kinds: set[str] = set()
        self.problems: list[str] = []
        self._started = self._last = time.monotonic()
        self._tty = sys.stderr.isatty()

    def report(self, report: SagaReport) -> None:
        self.sagas += 1
        self.rows += report.verdict.rows
        self.failed += not report.ok
        if self.as_json:
            typer.echo(json.dumps(report.to_dict(), ensure_ascii=False))
        elif not report.ok:
            typer.echo(f"FAILED  {report.saga_id}")
            for check in report.faults() + [c for c in report.checks if not c.fatal]:
                typer.echo(_check_line(check))
        elif self.verbose:
            seen = "; ".join(f"{c.source} {c.agreement} {c.detail}" for c in report.checks)
            typer.echo(
                f"ok      {report.saga_id}  {report.verdict.rows} rows  [{seen or 'chain only'}]"
            )
        warnings = report.warnings()
        self.warnings += len(warnings)
        self.warning_kinds.update(w.kind for w in warnings)
        if not self.as_json:
            for warning in warnings:
                typer.echo(f"WARNING {report.saga_id} seq {warning.seq}: {warning.detail}")
        self._progress()

    def problem(self, text: str) -> None:
        self.problems.append(text)
        if not self.as_json:
            typer.echo(f"FAILED  {text}")

    def _progress(self) -> None:
        now = time.monotonic()
        if now - self._last < PROGRESS_EVERY:
            return
        self._last = now
        rate = self.rows / max(now - self._started, 1e-9)
        line = f"… {self.rows:,} rows in {self.sagas:,} sagas, {rate:,.0f} rows/s"
        typer.echo(f"\r{line}" if self._tty else line, err=True, nl=not self._tty)

    def end_progress(self) -> None:
        """End the progress line on a terminal, so that the summary starts on its own."""
        if self._tty and time.monotonic() - self._started >= PROGRESS_EVERY:
            typer.echo("", err=True)

    def finish(self) -> int:
        self.end_progress()
        ok = not self.failed and not self.problems
        summary = {
            "ok": ok,
            "sagas": self.sagas,
            "rows": self.rows,
            "failed": self.failed,
            "problems": self.problems,
            "warnings": self.warnings,
        }
        if self.as_json:
            typer.echo(json.dumps({"summary": summary}, ensure_ascii=False))
        else:
            verdict = "all verified" if ok else f"{self.failed} failed"
            extra = f", {len(self.problems)} log problems" if self.problems else ""
            if self.warnings:
                plural = "s" if self.warnings > 1 else ""
                kinds = "; ".join(WARNING_KINDS[k] for k in sorted(self.warning_kinds))
                extra += f", {self.warnings} warning{plural} ({kinds})"
            typer.echo(f"{self.sagas:,} sagas, {self.rows:,} rows: {verdict}{extra}")
        return 0 if ok else 1


def _check_line(check: AnchorCheck) -> str:
    at = f"seq {check.seq}" if check.seq is not None else ""
    return f"  {check.source.value:<10} {at:<10} {check.agreement.value}: {check.detail}"


def _usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _roots(
    settings: Settings,
    trust_file: Path | None,
    public_key: Path | None,
    fingerprint: str | None,
    bundle: Path | None = None,
) -> TrustRoots | None:
    extra = () if bundle is None else (bundle,)
    try:
        return trust_roots(
            settings,
            trust_file=trust_file,
            public_key=public_key,
            pinned_fingerprint=fingerprint,
            candidates=tuple(p / PUBLIC_KEY for p in extra),
            beside=extra,
        )
    except SagacityError as exc:
        raise _usage(str(exc)) from None


def _bundle_key(path: Path, roots: TrustRoots | None) -> Ed25519PublicKey | None:
    """The pinned key the bundle's manifest names (else the first pinned key, so that the
    verifier names the mismatch); None when nothing is pinned."""
    if roots is None:
        return None
    keys = roots.signer_keys()
    try:
        named = parse_json((path / "manifest.json").read_bytes()).get("key_id")
    except (OSError, ValueError, AttributeError):
        named = None
    return keys.get(named) if isinstance(named, str) and named in keys else roots.signers[0].key


def _bundle(
    path: Path,
    key: Ed25519PublicKey | None,
    out: Output,
    *,
    allow_unanchored: bool,
    keyring: Keyring | None = None,
    trust: TrustRoots | None = None,
    not_older_than: timedelta | None = None,
    newer: str | None = None,
) -> int:
    """Verify a bundle, streaming its sagas, and end with the verdict word and what it means."""
    verifier = BundleVerifier(
        path,
        public_key=key,
        keyring=keyring,
        trust=trust,
        not_older_than=not_older_than,
        newer=newer,
    )
    problems = list(verifier.files())
    if not out.as_json:
        claimed = verifier.manifest.get("anchors")
        anchors = ", ".join(claimed) if claimed else "none"
        typer.echo(f"bundle {path}: anchors {anchors if claimed is not None else 'not listed'}")
        if verifier.trusted:
            typer.echo(f"  trusted key {verifier.key_id}")
        elif verifier.key_id:
            typer.echo(
                f"  no trusted key: checked with the bundle's own key {verifier.key_id}, "
                "which proves nothing about who made it"
            )
        _head_lines(verifier)
    for text in problems:
        out.problem(text)
    if verifier.manifest:
        for report in verifier.sagas():
            out.report(report)
        for text in verifier.problems[len(problems) :]:
            out.problem(text)
        # every line of journal.jsonl, past a fault and unreadable ones too
        out.rows = verifier.rows
    unanchored = verifier.unanchored if verifier.manifest else []
    verdict = judge(
        failed=bool(out.failed or out.problems),
        unanchored=unanchored,
        trusted=verifier.trusted,
        allow_unanchored=allow_unanchored,
        stale=bool(verifier.stale),
    )
    _bundle_summary(out, verifier, verdict, unanchored)
    return verdict.exit_code


def _head_lines(verifier: BundleVerifier) -> None:
    """The bundle's tree head, who cosigned it, and the time it is fresh as of."""
    opened = None if verifier.head is None else verifier.head.opened
    if opened is not None:
        signers = ", ".join(
            f"{name} at {stamp(at)}" for name, at in sorted(opened.witnessed.items())
        )
        typer.echo(
            f"  tree head {opened.head.size} of {opened.head.origin}, cosigned by "
            f"{signers or 'no witness you trust'}"
        )
    if verifier.freshness is not None:
        typer.echo(f"  {verifier.freshness.line()}")
    for note in verifier.notes:
        typer.echo(f"  note: {note}")


def _bundle_summary(
    out: Output, verifier: BundleVerifier, verdict: BundleVerdict, unanchored: list[str]
) -> None:
    out.end_progress()
    counts = f"{out.sagas:,} sagas, {out.rows:,} rows"
    fresh = verifier.freshness
    if out.as_json:
        summary = {
            "verdict": verdict.value,
            "exit": verdict.exit_code,
            "ok": verdict.exit_code == 0,
            "trusted": verifier.trusted,
            "key_id": verifier.key_id,
            "sagas": out.sagas,
            "rows": out.rows,
            "failed": out.failed,
            "problems": out.problems,
            "unanchored": unanchored,
            "warnings": out.warnings,
            "fresh_as_of": None if fresh is None else stamp(fresh.at),
            "fresh_source": None if fresh is None else fresh.source,
            "stale": verifier.stale,
            "notes": verifier.notes,
        }
        typer.echo(json.dumps({"summary": summary}, ensure_ascii=False))
        return
    if verdict is BundleVerdict.FAILED:
        extra = f", {len(out.problems)} bundle problems" if out.problems else ""
        typer.echo(f"{counts}: FAILED ({out.failed} sagas failed{extra})")
        return
    if verdict is BundleVerdict.UNTRUSTED:
        own = f"the bundle's own key {verifier.key_id}" if verifier.key_id else "itself"
        typer.echo(
            f"{counts}: UNTRUSTED: consistent with {own}, but anyone can make such a bundle; "
            "verify with the key you trust (--trust, --fingerprint or --public-key)"
        )
    elif verdict is BundleVerdict.STALE:
        typer.echo(
            f"{counts}: STALE: every file, chain and signature checks out with the trusted key "
            f"{verifier.key_id}, but the bundle is not current:"
        )
        for text in verifier.stale:
            typer.echo(f"  - {text}")
    elif verdict is BundleVerdict.UNANCHORED:
        typer.echo(
            f"{counts}: UNANCHORED, refused (--allow-unanchored accepts a bundle that cannot "
            "show the following):"
        )
    elif verdict is BundleVerdict.VERIFIED_UNANCHORED:
        typer.echo(
            f"{counts}: VERIFIED, UNANCHORED: every chain and file checks out with the trusted "
            f"key {verifier.key_id}, but with --allow-unanchored:"
        )
    else:
        opened = None if verifier.head is None else verifier.head.opened
        logged = (
            "" if opened is None else f", and every inclusion proof in tree head {opened.head.size}"
        )
        typer.echo(
            f"{counts}: VERIFIED: every file, chain and signed checkpoint, and the manifest's "
            f"signature, check out with the trusted key {verifier.key_id}{logged}"
        )
    for text in unanchored if verdict not in (BundleVerdict.UNTRUSTED, BundleVerdict.STALE) else []:
        typer.echo(f"  - {text}")
    if out.warnings:
        plural = "s" if out.warnings > 1 else ""
        kinds = "; ".join(WARNING_KINDS[k] for k in sorted(out.warning_kinds))
        typer.echo(f"{out.warnings} warning{plural} ({kinds})")


def _text(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _usage(f"--checkpoint {path}: {exc}") from None


@asynccontextmanager
async def _temporal(settings: Settings, wanted: bool) -> AsyncIterator[Client | None]:
    if not wanted:
        yield None
        return
    try:
        client = await connect_client(settings)
    except RuntimeError as exc:  # no address configured
        raise _usage(str(exc)) from None
    yield client


async def _live(
    url: str,
    settings: Settings,
    saga_ids: list[str] | None,
    checkpoints: CheckpointDir | None,
    temporal: bool,
    out: Output,
    keyring: Keyring | None,
    roots: TrustRoots | None = None,
) -> int:
    # two connections: one streams rows while the other fetches rows anchors point at
    async with (
        await JournalStore.open(url, min_size=1, max_size=2) as journal,
        _temporal(settings, temporal) as client,
    ):
        log = None if checkpoints is None else _log_anchor(journal, checkpoints)
        reports = verify_journal(
            journal,
            saga_ids=saga_ids,
            checkpoints=checkpoints,
            temporal=client,
            keyring=keyring,
            log=log,
        )
        async with aclosing(reports) as stream:
            async for report in stream:
                out.report(report)
        for problem in [] if log is None else log.problems:
            out.problem(problem)
        if log is not None and roots is not None:
            # the witnesses' heads: a rolled-back or forked log, or a head short of the quorum
            for finding in await witness_findings(roots, log.heads, log.store):
                if finding.fatal:
                    out.problem(f"transparency log: {finding.line().removeprefix('FAILED ')}")
                else:
                    typer.echo(f"warning: transparency log: {finding.detail}", err=True)
    return out.finish()


def _log_anchor(journal: JournalStore, checkpoints: CheckpointDir) -> LogAnchor | None:
    """The transparency log beside the checkpoints, once it has a published tree head."""
    heads = HeadLog(checkpoints.path, checkpoints.key)
    attestor = Attestor(journal, checkpoints)
    log = LogAnchor(TlogStore(journal.pool), heads, attestor)
    return None if log.latest is None else log


def _saga_ids(sagas: Iterable[str] | None, all_: bool) -> list[str] | None:
    chosen = list(sagas or [])
    if all_ and chosen:
        raise _usage("give saga ids or --all, not both")
    if not all_ and not chosen:
        raise _usage("name the sagas to verify, or pass --all or --bundle PATH")
    return None if all_ else chosen


@hard_exit
def verify(
    sagas: Annotated[
        list[str] | None, typer.Argument(help="Saga ids to verify.", show_default=False)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Verify every saga in the journal.")] = False,
    bundle: Annotated[
        Path | None,
        typer.Option("--bundle", help="Verify an exported bundle offline instead of the database."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per saga, then a summary.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also list sagas that verify.")
    ] = False,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Journal database (default: SAGACITY_DATABASE_URL)."),
    ] = None,
    checkpoint_dir: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-dir", help="Signed checkpoints (default: SAGACITY_CHECKPOINT_DIR)."
        ),
    ] = None,
    trust_file: Annotated[
        Path | None,
        typer.Option(
            "--trust",
            help="The trust file pinning the keys checkpoints, tree heads and a bundle's manifest "
            "must be signed with, and the witnesses (default: SAGACITY_TRUST_FILE). Never one "
            "inside the folders the workers write.",
        ),
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="A trusted public key instead of a trust file (default: "
            "SAGACITY_CHECKPOINT_PUBLIC_KEY). A bundle verified with no trusted key is UNTRUSTED "
            "(exit 3).",
        ),
    ] = None,
    fingerprint: Annotated[
        str | None,
        typer.Option(
            "--fingerprint",
            help="Trust the key with this fingerprint (hex, at least 16 digits, as `sagacity dev` "
            "prints it): the bundle's public_key.pem or the configured key, if it matches.",
        ),
    ] = None,
    allow_unanchored: Annotated[
        bool,
        typer.Option(
            "--allow-unanchored",
            help="With --bundle: accept a bundle without signed checkpoints or manifest "
            "signature, and list what it cannot show.",
        ),
    ] = False,
    temporal: Annotated[
        bool,
        typer.Option("--temporal", help="Also ask each saga's Temporal workflow for its head."),
    ] = False,
    not_older_than: Annotated[
        str | None,
        typer.Option(
            "--not-older-than",
            help="With --bundle: refuse (STALE, exit 1) a bundle not fresh as of this long ago, "
            "ISO 8601 (P1D, PT2H) or seconds; only a time a trusted key signed counts.",
            show_default=False,
        ),
    ] = None,
    newer_checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="With --bundle: a newer signed tree head of the log (a note, or the log's "
            "checkpoints.jsonl); a bundle whose head it has grown past is STALE.",
            show_default=False,
        ),
    ] = None,
    keyring_file: Annotated[
        Path | None,
        typer.Option(
            "--keyring",
            help="The keyring decisions' signatures are checked with (default: SAGACITY_KEYRING; "
            "for a bundle, else the keyring it carries).",
        ),
    ] = None,
) -> None:
    """Recompute hash chains and compare them with checkpoints, Temporal and decision keys."""
    try:
        settings = load_settings()
        keyring_path = keyring_file or settings.keyring
        keyring = None if keyring_path is None else load_keyring(keyring_path)
    except SagacityError as exc:
        raise _usage(str(exc)) from None
    out = Output(as_json=as_json, verbose=verbose or bool(sagas))
    if bundle is not None:
        if sagas or all_ or temporal:
            raise _usage(
                "--bundle verifies the whole bundle; it takes no saga ids, --all or --temporal"
            )
        roots = _roots(settings, trust_file, public_key, fingerprint, bundle)
        limit = (
            None if not_older_than is None else duration_or_exit("--not-older-than", not_older_than)
        )
        raise typer.Exit(
            _bundle(
                bundle,
                _bundle_key(bundle, roots),
                out,
                allow_unanchored=allow_unanchored,
                keyring=keyring,
                trust=roots,
                not_older_than=limit,
                newer=_text(newer_checkpoint),
            )
        )
    if allow_unanchored or not_older_than is not None or newer_checkpoint is not None:
        raise _usage("--allow-unanchored, --not-older-than and --checkpoint go with --bundle")
    saga_ids = _saga_ids(sagas, all_)
    url = journal_url_or_exit(database_url)
    checkpoints = roots = None
    folder = checkpoint_dir or settings.checkpoint_dir
    if folder is None:
        typer.echo(
            "warning: no checkpoint directory (SAGACITY_CHECKPOINT_DIR): rows removed from the "
            "end of a saga, or a chain rewritten with fresh hashes, cannot be detected",
            err=True,
        )
    else:
        roots = _roots(settings, trust_file, public_key, fingerprint)
        if roots is None:
            raise _usage(f"checkpoints need a trust root: {PIN_A_KEY}")
        checkpoints, problems = trusted_checkpoints(folder, roots)
        if not as_json:
            typer.echo(f"checkpoints {folder}: {roots.describe()}", err=True)
        for text in problems:
            typer.echo(f"warning: {text}", err=True)
    try:
        status = asyncio.run(
            _live(url, settings, saga_ids, checkpoints, temporal, out, keyring, roots)
        )
    except SagacityError as exc:
        raise _usage(str(exc)) from None
    raise typer.Exit(status)
