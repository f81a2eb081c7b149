"""Writes the evidence test vectors of docs/evidence.md ("Test vectors") from the library itself.

Everything is fixed: keys come from fixed seeds (Ed25519 signatures are deterministic), every
timestamp is given, so the files only change when a rule does. ``tests/evidence/test_vectors.py``
runs this and compares byte for byte, so the committed files never go stale; rewrite them with
``.venv/bin/python -m tests.evidence.vectors.make_vectors``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.checkpoints import Kind, log_name, sign
from sagacity.evidence.decisions import Signer, Statement, message, signed_row
from sagacity.evidence.keys import key_id
from sagacity.evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    consistency_ranges,
    inclusion_ranges,
    leaf_data,
    leaf_hash,
    range_hash,
)
from sagacity.evidence.note import NoteKey, NoteSigner, TreeHead, WitnessCosigner, sign_note
from sagacity.evidence.trust import raw_public
from sagacity.journal import GENESIS_HASH
from sagacity.journal.canonical import input_hash
from sagacity.journal.chain import canonical_bytes

HERE = Path(__file__).parent
#: every vector's "at", "signed_at" and cosignature time: 2026-01-02T03:04:05.123456Z
AT = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
LOG_ORIGIN = "sagacity.local/journal/vectors"
WITNESS_NAME = "witness.example/w1"


def seeded_key(seed: str) -> Ed25519PrivateKey:
    """The Ed25519 key whose 32-byte seed is SHA-256 of ``seed``'s UTF-8 bytes."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode("utf-8")).digest())


SIGNER = seeded_key("sagacity-vectors-signer")
WITNESS = seeded_key("sagacity-vectors-witness")
APPROVER = seeded_key("sagacity-vectors-approver")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def keys() -> dict[str, Any]:
    """The three keys every other file uses: seed text, raw public key, fingerprints."""
    return {
        name: {
            "seed": f"sagacity-vectors-{name}",
            "public_key": b64(raw_public(key.public_key())),
            "key_id": key_id(key.public_key()),
        }
        for name, key in (("signer", SIGNER), ("witness", WITNESS), ("approver", APPROVER))
    }


# --- rows ---------------------------------------------------------------------------------------

#: (case, rows of one saga with no hash yet); timestamps in the hashed form
_SAGAS: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "non-ASCII saga id, fields and an empty result",
        [
            {
                "saga_id": "bestellung-zoë-☕",
                "tool_name": "charge_card",
                "phase": "INTENT",
                "input": '{"customer":"Zoë Ångström","note":"Grüße \\u00e9"}',
                "payload": "",
                "timestamp": "2026-01-02T03:04:05.000000Z",
            },
            {
                "saga_id": "bestellung-zoë-☕",
                "tool_name": "charge_card",
                "phase": "EXECUTED",
                "input": '{"customer":"Zoë Ångström","note":"Grüße \\u00e9"}',
                "payload": '{"charge_id":"ch_1","emoji":"🧾"}',
                "timestamp": "2026-01-02T03:04:05.000001Z",
            },
        ],
    ),
    (
        "control characters (no NUL: text columns cannot hold it), combining marks, year 1",
        [
            {
                "saga_id": "tab\there/100%+plus e\u0301",
                "tool_name": "tool\nwith newline",
                "phase": "INTENT",
                "input": "",
                "payload": "",
                "timestamp": "0001-01-01T00:00:00.000000Z",
            },
        ],
    ),
]


def rows() -> dict[str, Any]:
    """Row hashes: chained sagas, plus rows a verifier must refuse."""
    sagas: list[dict[str, Any]] = []
    for case, drafts in _SAGAS:
        prev, chained = GENESIS_HASH, []
        for seq, draft in enumerate(drafts, start=1):
            when = datetime.strptime(draft["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
            data = canonical_bytes(prev, seq=seq, **{**draft, "timestamp": when})
            digest = hashlib.sha256(data).hexdigest()
            chained.append(
                {**draft, "seq": seq, "prev_hash": prev, "message_hex": data.hex(), "hash": digest}
            )
            prev = digest
        sagas.append({"case": case, "rows": chained})
    good = sagas[0]["rows"][0]
    empty_input = {**good, "input": ""}
    empty_hash = hashlib.sha256(
        canonical_bytes(
            GENESIS_HASH,
            **{k: v for k, v in empty_input.items() if k in _ROW_FIELDS and k != "timestamp"},
            timestamp=datetime.strptime(good["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ"),
        )
    ).hexdigest()
    invalid = [
        {
            "case": "NULL input: not a journal row; hashing it as empty (this hash) is wrong",
            "row": {**_row(good), "input": None, "hash": empty_hash},
        },
        {
            "case": "the right digest in capitals: the stored text is compared, lowercase only",
            "row": {**_row(good), "hash": good["hash"].upper()},
        },
        {
            "case": "the digest blank-padded as a CHAR(64) column returns a shorter value",
            "row": {**_row(good), "hash": (good["hash"][:63] + " ")},
        },
    ]
    return {"genesis": GENESIS_HASH, "sagas": sagas, "invalid": invalid}


_ROW_FIELDS = ("saga_id", "seq", "tool_name", "phase", "input", "payload", "timestamp")


def _row(chained: dict[str, Any]) -> dict[str, Any]:
    return {name: chained[name] for name in (*_ROW_FIELDS, "hash")}


# --- checkpoints ----------------------------------------------------------------------------------

_CHECKPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("head", "order-7f3a", {}),
    ("sealed", "order-7f3a", {"kind": Kind.SEALED, "state": "completed"}),
    ("purged", "order-7f3a", {"kind": Kind.PURGED, "bundle": "ab" * 32}),
    ("non-ASCII and reserved characters", "zoë/100% sure+?~_.-", {}),
    ("control characters escaped in JSON", "tab\there\x01\x7f\u2028", {}),
    ("encoded name exactly 150 characters: kept", "é" * 25, {}),
    ("encoded name of 153 characters: a digest name", "é" * 25 + "x" * 3, {}),
    ("a long id", "saga-" + "x" * 200, {}),
]


def checkpoints() -> dict[str, Any]:
    """Checkpoint lines, the bytes they sign and the file each is appended to."""
    cases = []
    for case, saga_id, extra in _CHECKPOINTS:
        cp = sign(SIGNER, saga_id, 4, "48e2ec55" + "0" * 56, at=AT, **extra)
        cases.append(
            {
                "case": case,
                "saga_id": saga_id,
                "file": log_name(saga_id),
                "signed_message_hex": cp.message().hex(),
                "line": cp.line(),
            }
        )
    return {"signer": keys()["signer"], "checkpoints": cases}


# --- Merkle trees and tree heads ------------------------------------------------------------------

_LEAVES = [("order-7f3a", seq, hashlib.sha256(b"row %d" % seq).hexdigest()) for seq in range(1, 8)]


def merkle() -> dict[str, Any]:
    """Leaf hashes, roots of every prefix, every inclusion and consistency proof up to 7 leaves."""
    digests = [leaf_hash(leaf_data(*leaf)) for leaf in _LEAVES]
    nodes: dict[tuple[int, int], bytes] = {}
    frontier = Frontier()
    roots = [b64(EMPTY_ROOT)]
    for digest in digests:
        nodes.update(frontier.append(digest))
        roots.append(b64(frontier.root()))

    def proof(ranges: list[tuple[int, int]]) -> list[str]:
        return [b64(range_hash(start, end, nodes)) for start, end in ranges]

    size = len(digests)
    return {
        "leaves": [
            {
                "saga_id": s,
                "seq": q,
                "row_hash": h,
                "leaf_data_hex": leaf_data(s, q, h).hex(),
                "leaf_hash": b64(d),
            }
            for (s, q, h), d in zip(_LEAVES, digests, strict=True)
        ],
        "roots": [{"size": n, "root": root} for n, root in enumerate(roots)],
        "inclusion": [
            {"index": i, "size": n, "proof": proof(inclusion_ranges(i, n))}
            for n in range(1, size + 1)
            for i in range(n)
        ],
        "consistency": [
            {"old": m, "new": n, "proof": proof(consistency_ranges(m, n))}
            for n in range(1, size + 1)
            for m in range(1, n + 1)
        ],
    }


def notes() -> dict[str, Any]:
    """Signed tree heads: the log's signature and a witness's cosignature/v1 line."""
    log = NoteSigner(LOG_ORIGIN, SIGNER)
    witness = WitnessCosigner(WITNESS_NAME, WITNESS, clock=AT.timestamp)
    cases = []
    for size in (0, 3, 7):
        root = base64.b64decode(merkle()["roots"][size]["root"])
        head = TreeHead(LOG_ORIGIN, size, root)
        cases.append({"size": size, "text": head.text(), "note": sign_note(head, [log, witness])})
    return {
        "origin": LOG_ORIGIN,
        "log_vkey": NoteKey(LOG_ORIGIN, SIGNER.public_key()).vkey(),
        "witness_name": WITNESS_NAME,
        "witness_vkey": NoteKey(WITNESS_NAME, WITNESS.public_key(), 0x04).vkey(),
        "cosignature_time": int(AT.timestamp()),
        "notes": cases,
    }


# --- decisions ------------------------------------------------------------------------------------


def decisions() -> dict[str, Any]:
    """Signed decisions: the statement, the exact message, and the row payload that records it."""
    request_input = '{"amount":"12.50","customer":"Zoë"}'
    statements = [
        Statement("order-7f3a", 5, input_hash(request_input), "approve", "renée@example.com"),
        Statement("order-7f3a", 5, input_hash(request_input), "reject", "bob", reason="too much"),
    ]
    signer = Signer(APPROVER)
    cases = []
    for statement in statements:
        signature = signer.sign(statement, at=AT)
        data = message(statement, signed_at=signature.signed_at, key=signature.key_id)
        cases.append(
            {
                "request_input": request_input,
                "statement": {
                    "saga_id": statement.saga_id,
                    "seq": statement.seq,
                    "input_hash": statement.input_hash,
                    "decision": statement.decision,
                    "reason": statement.reason,
                    "result": statement.result,
                    "signed_at": signature.signed_at,
                    "key_id": signature.key_id,
                    "principal": statement.principal,
                },
                "message_hex": data.hex(),
                "signature": signature.signature,
                "row_payload": signed_row(statement, signature, "approvals-service"),
            }
        )
    return {"approver": keys()["approver"], "decisions": cases}


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "keys.json": keys,
    "rows.json": rows,
    "checkpoints.json": checkpoints,
    "merkle.json": merkle,
    "notes.json": notes,
    "decisions.json": decisions,
}


def render(build: Callable[[], dict[str, Any]]) -> str:
    """A vector file's text: indented JSON, non-ASCII kept, one newline at the end."""
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(folder: Path = HERE) -> None:
    for name, build in FILES.items():
        (folder / name).write_text(render(build), encoding="utf-8")


if __name__ == "__main__":
    main()
