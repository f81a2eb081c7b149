"""The transparency log's tree head an export bundle carries (``tlog/``), checked offline.

:class:`CarriedHead` opens ``tlog/checkpoint`` with the trusted key and counts the trusted
witnesses' cosignatures, reads each saga's inclusion proof from ``tlog/proofs.jsonl``, checks a
saga's proof against its rows, and says when the bundle is fresh as of and whether it still
counts as current. :class:`sagacity.evidence.bundle.BundleVerifier` drives it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.heads import (
    Freshness,
    OpenedHead,
    RowProof,
    open_head,
    read_newer,
    weigh,
    witness_keys,
    witnessed_freshness,
)
from sagacity.evidence.merkle import leaf_data, leaf_hash, verify_inclusion
from sagacity.evidence.report import Agreement, AnchorCheck, Source
from sagacity.journal import Entry

if TYPE_CHECKING:
    from sagacity.evidence.trust import TrustRoots

__all__ = ["HEAD", "LOG_PROOFS", "NO_HEAD", "CarriedHead"]

#: the log's tree head note, as published with its cosignatures
HEAD = "tlog/checkpoint"
#: per saga, ``saga_id``, ``seq``, ``leaf_index``, ``hashes``: its inclusion proof in that head
LOG_PROOFS = "tlog/proofs.jsonl"
#: What cannot be shown of a bundle without a witnessed tree head.
NO_HEAD = "whether the bundle's rows are the log's, and how old the bundle is, cannot be shown"
_TIMESTAMP = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass
class CarriedHead:
    """The bundle's tree head and inclusion proofs, once :meth:`read`; findings in ``problems``."""

    folder: Path
    key: Ed25519PublicKey
    trust: TrustRoots | None = None
    problems: list[str] = field(default_factory=list)
    opened: OpenedHead | None = None
    proofs: dict[str, RowProof] = field(default_factory=dict)

    def read(self, summary: object) -> None:
        """Open the head (it must be the one the manifest's ``tlog`` ``summary`` lists) and read
        the proofs; nothing to do when the bundle has no head."""
        if not (self.folder / HEAD).is_file():
            return
        try:
            note = (self.folder / HEAD).read_text(encoding="utf-8")
            quorum = 0 if self.trust is None else self.trust.witness_quorum
            self.opened = open_head(note, self.key, witness_keys(self.trust), quorum)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self.problems.append(f"{HEAD}: not a tree head signed by the trusted key: {exc}")
            return
        head = self.opened.head
        for name in self.opened.forged:
            self.problems.append(f"{HEAD}: the cosignature of witness {name!r} does not verify")
        root = base64.b64encode(head.root).decode("ascii")
        listed = (
            (summary.get("origin"), summary.get("size"), summary.get("root"))
            if isinstance(summary, dict)
            else None
        )
        if listed != (head.origin, head.size, root):
            self.problems.append(
                f"{HEAD}: tree head {head.size} of {head.origin!r} is not the one the manifest "
                f"lists ({summary!r})"
            )
        try:
            with (self.folder / LOG_PROOFS).open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, start=1):
                    try:
                        proof, extra = RowProof.parse(line, frozenset({"saga_id"}))
                    except ValueError as exc:
                        self.problems.append(f"{LOG_PROOFS} line {number}: damaged: {exc}")
                        continue
                    self.proofs[str(extra["saga_id"])] = proof
        except (OSError, UnicodeDecodeError) as exc:
            self.problems.append(f"{LOG_PROOFS}: unreadable: {exc}")

    def freshness(
        self, manifest: Mapping[str, Any], *, signed: bool, trusted: bool
    ) -> Freshness | None:
        """The newest trusted witness cosignature on the head, else the head's publication time
        the manifest states, else its ``created_at``; ``signed``: the manifest's signature
        verified, with a key the verifier trusts when ``trusted``."""
        fresh = None if self.opened is None else witnessed_freshness(self.opened)
        if fresh is not None:
            return fresh
        whose = "signed" if signed else "unsigned"
        summary = manifest.get("tlog")
        published = summary.get("published_at") if isinstance(summary, dict) else None
        for text, source in (
            (published, f"the tree head's publication time, as the {whose} manifest states it"),
            (manifest.get("created_at"), f"the {whose} manifest's created_at"),
        ):
            if isinstance(text, str):
                try:
                    at = datetime.strptime(text, _TIMESTAMP).replace(tzinfo=UTC)
                except ValueError:
                    self.problems.append(f"manifest.json: {text!r} is not a timestamp")
                    return None
                # only a manifest a trusted key signed dates the bundle for --not-older-than
                return Freshness(at, source, signed and trusted)
        return None

    def current(
        self,
        fresh: Freshness | None,
        *,
        not_older_than: timedelta | None,
        newer: str | None,
        now: datetime,
    ) -> tuple[Freshness | None, list[str], list[str]]:
        """The bundle's freshness (a newer head showing the log has not grown may renew it), why
        it is not current (empty: it is), and notes; forgeries go to ``problems``."""
        other = None
        if newer is not None:
            try:
                other = read_newer(newer, self.key, witness_keys(self.trust))
            except EvidenceUnavailable as exc:
                self.problems.append(f"the checkpoint you gave: {exc}")
                return fresh, [], []
        found = weigh(
            None if self.opened is None else self.opened.head,
            fresh,
            not_older_than=not_older_than,
            newer=other,
            now=now,
        )
        self.problems += found.problems
        return found.fresher or fresh, found.stale, found.notes

    def short(self) -> str | None:
        """What the bundle lacks in witnessing, or None."""
        if self.opened is not None:
            return self.opened.short_of_quorum
        quorum = 0 if self.trust is None else self.trust.witness_quorum
        if quorum:
            return (
                f"no tree head of the log in the bundle, and the trust file requires {quorum} "
                f"witness cosignatures: {NO_HEAD}"
            )
        return None

    def check(
        self, saga_id: str, stored: Mapping[int, str], last: Entry | None
    ) -> AnchorCheck | None:
        """The saga's inclusion proof against the head (None: the bundle has no head);
        ``stored`` maps seqs to the rows' hashes."""
        if self.opened is None:
            return None
        head = self.opened.head
        proof = self.proofs.get(saga_id)
        if proof is None:
            detail = f"no row of this saga is in the bundle's tree head {head.size}"
            return AnchorCheck(Source.LOG, Agreement.MISSING, detail)
        row_hash = stored.get(proof.seq)
        if row_hash is None:
            detail = f"the inclusion proof is of seq {proof.seq}, which the bundle does not hold"
            return AnchorCheck(Source.LOG, Agreement.DISAGREES, detail, proof.seq, fatal=True)
        leaf = leaf_hash(leaf_data(saga_id, proof.seq, row_hash))
        if not verify_inclusion(leaf, proof.index, head.size, proof.hashes, head.root):
            detail = (
                f"its inclusion proof (leaf {proof.index}) does not verify against tree head "
                f"{head.size}: the row, the proof or the head was changed, or the log holds "
                "another row there"
            )
            return AnchorCheck(Source.LOG, Agreement.DISAGREES, detail, proof.seq, fatal=True)
        after = ""
        if last is not None and last.seq != proof.seq:
            after = f"; rows after seq {proof.seq} are not in it"
        detail = f"leaf {proof.index} of tree head {head.size}{after}"
        return AnchorCheck(Source.LOG, Agreement.AGREES, detail, proof.seq)
