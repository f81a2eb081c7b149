"""AES-256-GCM payload codec: what Sagacity hands Temporal is encrypted before it leaves the process.

Temporal keeps every workflow and activity input and result, signal, update, query answer,
heartbeat and memo in its history, readable by whoever can read the namespace. Through this codec
each payload is serialized whole (metadata and data) and sealed under the keyring's first key;
Temporal stores ``encoding: binary/encrypted``, the key's id and ciphertext. Decoding uses the key
the payload names, so a key retired from encrypting still decrypts (rotation: put the new key
first, keep the old ones after it until no running saga's history needs them).

Payloads without that encoding are decoded as they are: histories written before the codec was on
(the replay corpus in ``tests/temporal/histories``) and signals sent in clear with the plain
``temporal`` CLI still read. A payload naming a key this process does not hold raises
:class:`~sagacity.errors.CodecKeyMissing`: the workflow task fails, visibly, and Temporal retries
it until a worker with the key takes it. A payload that does not open with the key it names
(altered, or sealed by someone without the key) is handed on marked :data:`UNREADABLE`, with
why: converting it raises :class:`~sagacity.errors.PayloadUnreadable`, and a saga refuses and
records a decision that carries one (its handlers read their payloads themselves), where a codec
that raised would fail every workflow task of the saga the payload was sent to.

A value wrapped in :class:`ClearText` is written with the :data:`CLEAR` mark, which
:mod:`sagacity.temporal.codec_scope` leaves unsealed: for what is meant to be read without the
codec (the ``decide`` update's answer).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    EncodingPayloadConverter,
    PayloadCodec,
)

from sagacity.errors import CodecKeyMissing, PayloadUnreadable

__all__ = [
    "CLEAR",
    "ENCODING",
    "KEY_ID",
    "UNREADABLE",
    "AesGcmCodec",
    "ClearText",
    "CodecKey",
    "data_converter",
    "new_codec_key",
    "parse_keys",
    "unreadable",
]

#: the ``encoding`` metadata of an encrypted payload (the name Temporal's samples and UI use)
ENCODING = b"binary/encrypted"
#: the metadata naming the key a payload is encrypted with
KEY_ID = "encryption-key-id"
#: the ``encoding`` of what the codec hands on for a payload it cannot open (its metadata says why)
UNREADABLE = b"binary/sagacity-unreadable"
_REASON = "sagacity-unreadable-reason"
#: the metadata marking a payload written from a :class:`ClearText`, to be left unsealed
CLEAR = "sagacity-clear"
_NONCE_BYTES = 12
_KEY_BYTES = 32
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class CodecKey:
    """One AES-256 key and the id payloads name it by."""

    id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.id):
            raise ValueError(
                f"codec key id {self.id[:80]!r}: expected 1 to 64 letters, digits, '.', '_' or '-'"
            )
        if len(self.secret) != _KEY_BYTES:
            raise ValueError(
                f"codec key {self.id!r}: expected {_KEY_BYTES} bytes, got {len(self.secret)}"
            )


def parse_keys(text: str) -> tuple[CodecKey, ...]:
    """Keys written ``id=<base64 of 32 bytes>``, separated by commas or lines (``#`` starts a
    comment); the first encrypts. :class:`ValueError` names the entry, never its key."""
    keys: list[CodecKey] = []
    lines = (line.partition("#")[0] for line in text.splitlines())
    for entry in filter(None, (e.strip() for line in lines for e in line.split(","))):
        key_id, sep, encoded = (part.strip() for part in entry.partition("="))
        if not (sep and key_id and encoded):
            raise ValueError(
                f"expected id=<base64 key>, got an entry without '=' ({len(keys) + 1})"
            )
        try:
            secret = base64.b64decode(encoded.replace("-", "+").replace("_", "/"), validate=True)
        except binascii.Error:
            raise ValueError(f"codec key {key_id[:80]!r} is not base64") from None
        if any(k.id == key_id for k in keys):
            raise ValueError(f"codec key {key_id[:80]!r} appears twice")
        keys.append(CodecKey(key_id, secret))
    return tuple(keys)


def new_codec_key(key_id: str) -> str:
    """A new random key as :func:`parse_keys` reads it: ``<key_id>=<base64>``."""
    key = CodecKey(key_id, os.urandom(_KEY_BYTES))
    return f"{key.id}={base64.b64encode(key.secret).decode()}"


class AesGcmCodec(PayloadCodec):
    """Encrypts with ``keys[0]``; decrypts with whichever key a payload names.

    Each payload gets a fresh random 96-bit nonce; the key id is bound in as associated data,
    so a payload relabelled with another key id does not decrypt.
    """

    def __init__(self, keys: Sequence[CodecKey]) -> None:
        if not keys:
            raise ValueError("a codec needs at least one key")
        if len({k.id for k in keys}) != len(keys):
            raise ValueError("codec key ids must be distinct")
        self.key_ids = tuple(k.id for k in keys)
        self._sealing = keys[0].id.encode()
        self._ciphers = {k.id.encode(): AESGCM(k.secret) for k in keys}
        # every sealed payload's metadata, copied in: a third of the cost of building the map
        self._sealed = Payload(metadata={"encoding": ENCODING, KEY_ID: self._sealing})

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload, serialized whole and sealed under the first key."""
        cipher = self._ciphers[self._sealing]
        bound = ENCODING + self._sealing
        sealed = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            data = cipher.encrypt(nonce, payload.SerializeToString(), bound)
            out = Payload()
            out.CopyFrom(self._sealed)
            out.data = nonce + data
            sealed.append(out)
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Encrypted payloads opened (marked :data:`UNREADABLE` when one does not open); any
        other payload as it is (see the module's docstring)."""
        return [self._open(p) if p.metadata.get("encoding") == ENCODING else p for p in payloads]

    def _open(self, payload: Payload) -> Payload:
        key_id = payload.metadata.get(KEY_ID, b"")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CodecKeyMissing(
                f"a payload is encrypted with codec key {_name(key_id)!r}, which this process does "
                f"not hold (it holds {', '.join(self.key_ids)}); add it to SAGACITY_CODEC_KEYS after "
                "the key that encrypts, and the failed task is retried"
            )
        nonce, data = payload.data[:_NONCE_BYTES], payload.data[_NONCE_BYTES:]
        try:
            return Payload.FromString(cipher.decrypt(nonce, data, ENCODING + key_id))
        except (InvalidTag, DecodeError):
            why = (
                f"a payload encrypted with codec key {_name(key_id)!r} does not decrypt: it was "
                "altered, or another key carries that id"
            )
            return Payload(metadata={"encoding": UNREADABLE, _REASON: why.encode()})


def _name(key_id: bytes) -> str:
    """A key id as an error message names it (only there: decoding every payload skips it)."""
    return key_id.decode(errors="replace")[:80]


def unreadable(payload: Payload) -> str | None:
    """Why the codec could not open ``payload``, or None when it is not marked so."""
    if payload.metadata.get("encoding") != UNREADABLE:
        return None
    return payload.metadata.get(_REASON, b"").decode(errors="replace") or "unreadable"


class _UnreadableConverter(EncodingPayloadConverter):
    """Reads what the codec marked :data:`UNREADABLE`: it raises why; it writes nothing."""

    @property
    def encoding(self) -> str:
        return UNREADABLE.decode()

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise PayloadUnreadable(unreadable(payload))


class ClearText(str):
    """Text that is no secret, for a reader without the codec: written marked :data:`CLEAR`."""

    __slots__ = ()


class _ClearTextConverter(EncodingPayloadConverter):
    """Writes a :class:`ClearText` as JSON text marked :data:`CLEAR`; reads nothing: what it
    writes is ``json/plain``, which the JSON converter reads."""

    @property
    def encoding(self) -> str:
        # its key among the composite's converters, distinct from the JSON converter's
        return "sagacity/clear-text"

    def to_payload(self, value: Any) -> Payload | None:
        if not isinstance(value, ClearText):
            return None
        return Payload(
            metadata={"encoding": b"json/plain", CLEAR: b"1"},
            data=json.dumps(str(value)).encode(),
        )

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise NotImplementedError  # never chosen to read: the JSON converter reads json/plain


#: Temporal's pydantic converters, built once for the process (see :class:`PayloadConverter`);
#: the clear-text one first, so it sees a :class:`ClearText` before the JSON converter does
_CONVERTERS = (
    _ClearTextConverter(),
    *PydanticPayloadConverter().converters.values(),
    _UnreadableConverter(),
)


class PayloadConverter(CompositePayloadConverter):
    """Temporal's pydantic payload converter, sharing one set of converters.

    The worker builds a payload converter for every workflow activation; pydantic's is costly to
    build and starts with an empty cache of type adapters, so each activation rebuilt the
    adapters it needed. Shared, they are built once (the cache is thread-safe, an adapter
    immutable): a tenth of a saga's worker CPU in ``bench.saga_overhead``.
    """

    def __init__(self) -> None:
        super().__init__(*_CONVERTERS)


def data_converter(codec: PayloadCodec | None) -> DataConverter:
    """Temporal's pydantic converter; with ``codec``, payloads go through it, and so do failures'
    messages and stack traces (moved into an encoded attribute, since tools' error text may
    quote their input)."""
    plain = DataConverter(payload_converter_class=PayloadConverter)
    if codec is None:
        return plain
    return dataclasses.replace(
        plain,
        payload_codec=codec,
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )
