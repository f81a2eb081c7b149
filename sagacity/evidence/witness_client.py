"""Talking to C2SP witnesses: submit a tree head for cosigning, read the head a witness holds.

:class:`Witnesses` is the sequencer's side of https://c2sp.org/tlog-witness: it asks each
witness of the trust file (those with a ``url``) to cosign a head, with the consistency proof
from the size that witness holds (remembered between passes; a 409 answer says it, and the head
is proved again from there, once). Every call is bounded by a timeout; a witness that is down
is reported, never waited for. :func:`latest_cosigned` reads a witness's
``GET /checkpoint?origin=`` (Sagacity's extension), which verifiers use to catch a rolled-back
checkpoint store.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field

import httpx

from sagacity.errors import EvidenceUnavailable, WitnessRefused
from sagacity.evidence.note import COSIGNATURE_V1, NoteKey, TreeHead
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.witness import SIZE_TYPE, AddCheckpoint

__all__ = ["WitnessEndpoint", "Witnesses", "Witnessing", "latest_cosigned", "log_witnessing"]

#: seconds one call to a witness may take, all in
TIMEOUT = 3.0
# how much of a refusal's body is quoted in a report
_QUOTE = 200

#: proves tree head ``new`` extends tree head ``old`` (RFC 9162 consistency proof hashes)
Prover = Callable[[int, int], Awaitable[list[bytes]]]


@dataclass(frozen=True, slots=True)
class WitnessEndpoint:
    """A witness to ask: its cosignature key and base URL."""

    key: NoteKey
    url: str

    @property
    def name(self) -> str:
        return self.key.name

    @classmethod
    def of(cls, witnesses: Sequence[TrustedWitness]) -> list[WitnessEndpoint]:
        """The witnesses of a trust file that can be reached (those with a ``url``)."""
        return [
            cls(NoteKey(w.name, w.key, COSIGNATURE_V1), w.url.rstrip("/"))
            for w in witnesses
            if w.url
        ]


def _quote(response: httpx.Response) -> str:
    return response.text.strip()[:_QUOTE] or response.reason_phrase


def cosignature_lines(answer: str, text: str, key: NoteKey) -> list[str]:
    """The lines of ``answer`` that are ``key``'s valid cosignatures of the note ``text``; lines
    of other keys are ignored (C2SP), a bad line of this key is :class:`WitnessRefused`."""
    found = []
    prefix = f"\u2014 {key.name} "
    for line in answer.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            raw = base64.b64decode(line[len(prefix) :], validate=True)
        except (binascii.Error, ValueError):
            raise WitnessRefused(502, f"witness {key.name}: a cosignature is not base64") from None
        if raw[:4] != key.id:
            continue
        if not key.verifies(text, raw[4:]):
            raise WitnessRefused(502, f"witness {key.name}: its cosignature does not verify")
        found.append(line + "\n")
    return found


async def _add_checkpoint(
    client: httpx.AsyncClient, witness: WitnessEndpoint, request: AddCheckpoint, text: str
) -> list[str]:
    """POST one request; the witness's verified cosignature lines. :class:`WitnessRefused`
    when it refuses (4xx), :class:`EvidenceUnavailable` when it cannot be reached."""
    try:
        response = await client.post(f"{witness.url}/add-checkpoint", content=request.body())
    except httpx.HTTPError as exc:
        raise EvidenceUnavailable(f"witness {witness.name} unreachable: {exc!r}") from None
    if response.status_code == 200:
        lines = cosignature_lines(response.text, text, witness.key)
        if not lines:
            raise WitnessRefused(502, f"witness {witness.name} answered no cosignature of its key")
        return lines
    media = response.headers.get("content-type", "").partition(";")[0].strip()
    if response.status_code == 409 and media == SIZE_TYPE:
        held = response.text.removesuffix("\n")
        if not held.isdigit():
            raise WitnessRefused(409, f"witness {witness.name} answered size {held[:40]!r}")
        raise WitnessRefused(409, f"it holds tree head {held}", size=int(held))
    if 400 <= response.status_code < 500:
        raise WitnessRefused(response.status_code, _quote(response))
    raise EvidenceUnavailable(
        f"witness {witness.name} failed: {response.status_code} {_quote(response)}"
    )


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings every witness request uses, made once: a client's own default loads the
    CA bundle anew (about 24 ms of CPU), and the sequencer asks its witnesses on every pass."""
    return httpx.create_ssl_context()


async def latest_cosigned(
    witness: WitnessEndpoint, origin: str, *, timeout: float = TIMEOUT
) -> str | None:
    """The latest note ``witness`` cosigned for log ``origin`` (None: it holds none);
    :class:`EvidenceUnavailable` when it cannot be reached or answers otherwise."""
    try:
        async with (
            asyncio.timeout(timeout),
            httpx.AsyncClient(timeout=timeout, verify=_tls()) as client,
        ):
            response = await client.get(f"{witness.url}/checkpoint", params={"origin": origin})
    except (httpx.HTTPError, TimeoutError) as exc:
        raise EvidenceUnavailable(f"witness {witness.name} unreachable: {exc!r}") from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise EvidenceUnavailable(
            f"witness {witness.name} answered {response.status_code}: {_quote(response)}"
        )
    return response.text


@dataclass
class Witnessing:
    """What asking the witnesses to cosign one tree head gave."""

    head: TreeHead
    #: verified cosignature lines, to add to the note
    lines: list[str] = field(default_factory=list)
    cosigned: list[str] = field(default_factory=list)
    #: witness name -> why it refused (never cosigned: a rollback, a fork, a bad proof)
    refused: dict[str, str] = field(default_factory=dict)
    #: witness name -> why it could not be asked (down, timed out, failing)
    unreachable: dict[str, str] = field(default_factory=dict)
    #: witness name -> the size of a head it had cosigned that the checkpoint store lacks
    ahead: dict[str, int] = field(default_factory=dict)

    def alerts(self) -> list[str]:
        """What an operator must look at: refusals, and heads lost from the checkpoint store."""
        size = self.head.size
        found = [
            f"witness {name} refused to cosign tree head {size}: {why}"
            for name, why in self.refused.items()
        ]
        found += [
            f"witness {name} had cosigned tree head {held}, newer than the latest head the "
            "checkpoint store holds: heads were lost from it (a crash between cosigning and "
            "publishing, or a rollback); run `sagacity log verify`"
            for name, held in self.ahead.items()
        ]
        return found

    def warnings(self) -> list[str]:
        """Witnesses that could not be asked (tried again on the next pass)."""
        return [
            f"tree head {self.head.size} not cosigned by witness {name} yet: {why}"
            for name, why in self.unreachable.items()
        ]


class Witnesses:
    """Asks witnesses to cosign tree heads, remembering the size each holds."""

    def __init__(self, endpoints: Sequence[WitnessEndpoint], *, timeout: float = TIMEOUT) -> None:
        self.endpoints = list(endpoints)
        self.keys = [w.key for w in self.endpoints]
        self._timeout = timeout
        self._held: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.endpoints)

    def learn(self, names: Collection[str], size: int) -> None:
        """``names`` cosigned tree head ``size`` (read from a published note): where nothing
        newer is known, that is the size to prove from."""
        for name in names:
            self._held.setdefault(name, size)

    async def cosign(
        self,
        head: TreeHead,
        note: str,
        prove: Prover,
        *,
        published: int,
        only: Collection[str] | None = None,
    ) -> Witnessing:
        """Ask each witness (of ``only``, when given) to cosign ``head``, whose log-signed note
        is ``note``, all at once; ``published`` is the size of the latest head the checkpoint
        store holds, to tell a witness that saw more."""
        result = Witnessing(head)
        asked = [w for w in self.endpoints if only is None or w.name in only]
        async with httpx.AsyncClient(timeout=self._timeout, verify=_tls()) as client:
            answers = await asyncio.gather(
                *(self._ask(client, w, head, note, prove, published, result) for w in asked)
            )
        for witness, lines in zip(asked, answers, strict=True):
            if lines:
                result.cosigned.append(witness.name)
                result.lines += lines
        return result

    async def _ask(
        self,
        client: httpx.AsyncClient,
        witness: WitnessEndpoint,
        head: TreeHead,
        note: str,
        prove: Prover,
        published: int,
        result: Witnessing,
    ) -> list[str]:
        name = witness.name
        old = self._held.get(name, 0)
        retried = False
        while True:
            if old > head.size:
                result.refused[name] = (
                    f"it holds tree head {old}, larger than this one: leaves were removed from "
                    "the log, or heads from the checkpoint store"
                )
                return []
            proof = [] if old in (0, head.size) else await prove(old, head.size)
            try:
                async with asyncio.timeout(self._timeout):
                    lines = await _add_checkpoint(
                        client, witness, AddCheckpoint(old, proof, note), head.text()
                    )
            except WitnessRefused as exc:
                if exc.size is not None and exc.size != old and not retried:
                    # it holds another size than we thought: prove from there, once
                    retried = True
                    old = self._held[name] = exc.size
                    if exc.size > published:
                        result.ahead[name] = exc.size
                    continue
                result.refused[name] = f"{exc.status}: {exc}"
                return []
            except (EvidenceUnavailable, TimeoutError) as exc:
                result.unreachable[name] = str(exc) or f"no answer in {self._timeout:g} s"
                return []
            self._held[name] = head.size
            return lines


def log_witnessing(log: logging.Logger, witnessing: Witnessing | None, down: set[str]) -> set[str]:
    """Log what one pass's witnesses said, given the witnesses ``down`` on the last pass that
    asked: refusals and lost heads as errors on every pass, a witness going down (a warning) or
    coming back once. Returns the witnesses down now."""
    if witnessing is None:
        return down
    for alert in witnessing.alerts():
        log.error("transparency log: %s", alert)
    now = set(witnessing.unreachable)
    if now - down:
        for warning in witnessing.warnings():
            log.warning("transparency log: %s (said once while it stays so)", warning)
    for name in sorted(down & set(witnessing.cosigned)):
        log.info("transparency log: witness %s cosigns again", name)
    return now
