"""C2SP signed notes and checkpoints: the Go reference vector, witnesses, and refused notes."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.note import (
    COSIGNATURE_V1,
    NoteKey,
    NoteSigner,
    TreeHead,
    WitnessCosigner,
    open_note,
    sign_note,
)

# golang.org/x/mod/sumdb/note's documented example: Ed25519 is deterministic, so signing the
# same text with the same key must give the same line, byte for byte
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_LINE = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKv"
    "qfqdngotpRZb6KE6RyyBwJnAM=\n"
)

ORIGIN = "sagacity.local/journal/test"
HEAD = TreeHead(ORIGIN, 20852163, bytes(range(32)))


def test_the_go_reference_note_is_reproduced_byte_for_byte() -> None:
    seed = base64.b64decode(GO_SKEY.split("+", 4)[4])
    assert seed[0] == 1
    key = Ed25519PrivateKey.from_private_bytes(seed[1:])
    signer = NoteSigner("PeterNeumann", key)
    assert signer(GO_TEXT) == GO_LINE
    assert NoteKey("PeterNeumann", key.public_key()).vkey() == GO_VKEY


def test_a_checkpoint_is_three_lines_a_blank_line_and_signatures() -> None:
    log = Ed25519PrivateKey.generate()
    note = sign_note(HEAD, [NoteSigner(ORIGIN, log)])
    text, signatures = note.split("\n\n")
    assert text + "\n" == f"{ORIGIN}\n20852163\n{base64.b64encode(bytes(range(32))).decode()}\n"
    assert signatures.startswith(f"\u2014 {ORIGIN} ")
    opened = open_note(note, NoteKey(ORIGIN, log.public_key()))
    assert opened.head == HEAD
    assert opened.witnessed == {}


def test_a_witness_cosignature_is_checked_and_dated() -> None:
    log, witness = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    cosigner = WitnessCosigner("witness.example/w1", witness, clock=lambda: 1_700_000_000.5)
    note = sign_note(HEAD, [NoteSigner(ORIGIN, log), cosigner])
    log_key = NoteKey(ORIGIN, log.public_key())
    witness_key = NoteKey("witness.example/w1", witness.public_key(), COSIGNATURE_V1)
    opened = open_note(note, log_key, [witness_key])
    assert opened.witnessed == {"witness.example/w1": 1_700_000_000}
    # verifiers that do not know the witness ignore its line
    assert open_note(note, log_key).head == HEAD
    # a witness that did not sign is missing
    other = NoteKey("witness.example/w2", Ed25519PrivateKey.generate().public_key(), 0x04)
    with pytest.raises(ValueError, match=r"no cosignature of witness witness\.example/w2"):
        open_note(note, log_key, [other])
    # the cosignature covers its timestamp: a changed time fails the note
    lines = note.splitlines(keepends=True)
    raw = bytearray(base64.b64decode(lines[-1].split(" ")[2]))
    raw[4 + 7] ^= 1
    lines[-1] = f"\u2014 witness.example/w1 {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(ValueError, match=r"signature of 'witness\.example/w1' does not verify"):
        open_note("".join(lines), log_key, [witness_key])


def test_forged_and_malformed_notes_are_refused() -> None:
    log = Ed25519PrivateKey.generate()
    key = NoteKey(ORIGIN, log.public_key())
    note = sign_note(HEAD, [NoteSigner(ORIGIN, log)])
    forged = note.replace("20852163", "20852164")
    with pytest.raises(ValueError, match="does not verify"):
        open_note(forged, key)
    other = sign_note(HEAD, [NoteSigner(ORIGIN, Ed25519PrivateKey.generate())])
    with pytest.raises(ValueError, match="no signature of the trusted key"):
        open_note(other, key)
    with pytest.raises(ValueError, match="not of"):
        open_note(sign_note(TreeHead("elsewhere", 1, bytes(32)), [NoteSigner("x", log)]), key)
    for bad, reason in [
        (note.replace("\n\n", "\n"), "no blank line"),
        (note.replace("\u2014", "-"), "em dash"),
        (note.replace(ORIGIN, ORIGIN + "\x07"), "control"),
        (note.replace("\n\n", "\nextension\n\n"), "extension"),
        (note.replace("20852163", "020852163"), "decimal"),
    ]:
        with pytest.raises(ValueError, match=reason):
            open_note(bad, key)
    with pytest.raises(ValueError, match="spaces"):
        NoteSigner("a name", log)


def test_a_verifier_key_is_parsed_back_and_checked() -> None:
    log = Ed25519PrivateKey.generate()
    key = NoteKey(ORIGIN, log.public_key())
    assert NoteKey.parse(key.vkey()) == key
    assert NoteKey.parse(GO_VKEY).name == "PeterNeumann"
    witness = NoteKey("witness.example/w1", log.public_key(), COSIGNATURE_V1)
    assert NoteKey.parse(witness.vkey()).type == COSIGNATURE_V1
    name, ident, raw = key.vkey().split("+", 2)
    for bad in (
        "",
        "junk",
        f"{name}+00000000+{raw}",  # a key id that is not the key's
        f"{name}+{ident}+" + base64.b64encode(b"\x02" + bytes(32)).decode(),  # unknown type
        f"{name}+{ident}+not-base64",
        f"na me+{ident}+{raw}",
    ):
        with pytest.raises(ValueError):
            NoteKey.parse(bad)


def test_a_quorum_counts_any_of_the_witnesses() -> None:
    log, w1, w2 = (Ed25519PrivateKey.generate() for _ in range(3))
    note = sign_note(HEAD, [NoteSigner(ORIGIN, log), WitnessCosigner("w.example/1", w1)])
    keys = [
        NoteKey("w.example/1", w1.public_key(), COSIGNATURE_V1),
        NoteKey("w.example/2", w2.public_key(), COSIGNATURE_V1),
    ]
    log_key = NoteKey(ORIGIN, log.public_key())
    assert set(open_note(note, log_key, keys, quorum=1).witnessed) == {"w.example/1"}
    with pytest.raises(ValueError, match="1 of the 2 witness cosignatures required"):
        open_note(note, log_key, keys, quorum=2)
    with pytest.raises(ValueError, match=r"no cosignature of witness w\.example/2"):
        open_note(note, log_key, keys)
