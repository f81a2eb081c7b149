"""docs/decisions.md against the code: its vector, its message bytes and its verifier snippet."""

from __future__ import annotations

import ast
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.decisions import (
    Keyring,
    Signer,
    Statement,
    keyring_entry,
    message,
    row_statement,
    signed_row,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "decisions.md").read_text(encoding="utf-8")
SEED = bytes(range(32))
STATEMENT = Statement(
    saga_id="order-7f3a",
    seq=5,
    input_hash="9c56cc51b374c3ba189210d5b6d4bf57790d351c96c47c02190ecf1e430635ab",
    decision="approve",
    principal="renée@example.com",
)
AT = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)


def test_the_vector_is_what_the_code_signs() -> None:
    signer = Signer(Ed25519PrivateKey.from_private_bytes(SEED))
    signature = signer.sign(STATEMENT, at=AT)
    entry = keyring_entry("renée", signer.key.public_key(), ["renée@example.com"])
    documented_entry, documented_row = (json.loads(b) for b in blocks("json")[-2:])
    assert documented_entry == entry.model_dump()
    assert signer.key_id in DOC
    literal = ast.literal_eval(blocks("text")[0].strip())
    assert literal == message(STATEMENT, signed_at=signature.signed_at, key=signer.key_id)
    assert documented_row == json.loads(signed_row(STATEMENT, signature, "renée"))
    found = row_statement("order-7f3a", 6, "APPROVED", json.dumps(documented_row))
    assert found is not None
    assert Keyring(keys=[entry]).refusal(found[0], found[1]) is None


def test_the_documented_verifier_accepts_the_vector_and_refuses_an_edited_approver() -> None:
    snippet = next(b for b in blocks("python") if "def decision_holds" in b)
    space: dict[str, Any] = {}
    exec(compile(snippet, "docs/decisions.md", "exec"), space)
    holds = space["decision_holds"]
    keyring = {"keys": [json.loads(blocks("json")[-2])]}
    row = {
        "saga_id": "order-7f3a",
        "seq": 6,
        "phase": "APPROVED",
        "payload": blocks("json")[-1].strip(),
    }
    assert holds(row, keyring)
    edited = row["payload"].replace('"by":"renée@example.com"', '"by":"mallory@example.com"')
    assert not holds({**row, "payload": edited}, keyring)
    assert not holds({**row, "seq": 7}, keyring)
    assert not holds({**row, "phase": "REJECTED"}, keyring)
