"""Small tools for saga tests that need no example database: sync, async, odd results."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, TypedDict

from sagacity import CompensableTool, CompensationContext, Reversibility, compensable
from sagacity.errors import NoEffect

#: what the tools did and undid, in order, for assertions
EFFECTS: list[str] = []


@compensable(by="unset_flag")
def set_flag(name: str) -> str:
    """A sync tool."""
    EFFECTS.append(f"set {name}")
    return name


def unset_flag(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unset {ctx.result}")


@compensable(by="unsend_note")
async def send_note(text: str) -> dict[str, Any]:
    """An async tool."""
    EFFECTS.append(f"note {text}")
    return {"text": text}


async def unsend_note(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unnote {ctx.input['text']}")


@compensable(by="post_correction", reversibility=Reversibility.COMPENSATABLE)
def post_notice(text: str) -> str:
    """COMPENSATABLE: a notice once read cannot be unread, only corrected."""
    EFFECTS.append(f"posted {text}")
    return text


def post_correction(ctx: CompensationContext) -> None:
    EFFECTS.append(f"corrected {ctx.result}")


@compensable(by="forget_set")
def make_set() -> set[int]:
    """Returns something JSON cannot hold."""
    EFFECTS.append("made set")
    return {1, 2}


def forget_set(ctx: CompensationContext) -> None:
    EFFECTS.append("forgot set")


@compensable(by="unexplode")
def explode(reason: str) -> None:
    """Always fails, and cannot say whether it did anything first."""
    raise RuntimeError(reason)


def unexplode(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unexplode failed={ctx.failed} result={ctx.result}")


class Declined(RuntimeError):
    """A refusal that, by the tool's declaration, leaves nothing behind."""


@compensable(by="undecline", no_effect_on=(Declined,))
def decline(reason: str, how: str = "declared") -> None:
    """Always fails without effect: by a declared exception type, or by raising NoEffect."""
    if how == "declared":
        raise Declined(reason)
    raise NoEffect(reason)


def undecline(ctx: CompensationContext) -> None:
    EFFECTS.append("undecline (never: it failed without effect)")


#: calls of ``flaky_lookup`` so far, to fail the first ones
FLAKY_CALLS: list[str] = []


@compensable(by="forget_lookup", idempotent=True)
def flaky_lookup(key: str, failures: int) -> str:
    """Idempotent: raises on its first ``failures`` calls, then answers."""
    FLAKY_CALLS.append(key)
    if len(FLAKY_CALLS) <= failures:
        raise ConnectionError(f"lookup service unavailable (call {len(FLAKY_CALLS)})")
    return key.upper()


def forget_lookup(ctx: CompensationContext) -> None:
    EFFECTS.append(f"forgot {ctx.result}")


@compensable(by="unstall", idempotent=True, timeout=timedelta(seconds=1))
async def stall(key: str, seconds: float) -> str:
    """Idempotent, with a 1 s limit: takes ``seconds``, so a long call times out every attempt."""
    EFFECTS.append(f"stall {key}")
    await asyncio.sleep(seconds)
    return key


async def unstall(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unstall {ctx.input['key']} failed={ctx.failed}")


@compensable(by="unslow")
async def slow_note(text: str, seconds: float) -> dict[str, Any]:
    """Not idempotent: writes a note after ``seconds``, long enough to cancel or abort mid-call."""
    await asyncio.sleep(seconds)
    EFFECTS.append(f"slow {text}")
    return {"text": text}


async def unslow(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unslow {ctx.input['text']}")


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire(amount: int, api_token: str) -> str:
    """Irreversible, and one argument is a secret the journal redacts."""
    EFFECTS.append(f"wired {amount}")
    return f"wire-{amount}"


#: credentials the ``leak`` tools put in their exception text, as HTTP clients do; none of them
#: may reach the journal, Temporal's history or the logs
LEAKED_SECRETS = ("hunter2", "sk-live-123", "abc.def", "s3cr3t-v4l", "tok-999")
_LEAKY_MESSAGE = (
    "GET https://bob:hunter2@api.example.com/v1?api_key=sk-live-123&page=2 failed: 401 "
    "{'Authorization': 'Bearer abc.def', 'X-Request-Id': 'r-1'}"
)


@compensable(by="unleak")
def leak(fail: bool) -> str:
    """Fails, when told to, with its request's credentials in the message; its undo always does."""
    if fail:
        raise PermissionError(_LEAKY_MESSAGE)
    return "leaked"


def unleak(ctx: CompensationContext) -> None:
    raise ConnectionError(f"undo refused: password=s3cr3t-v4l, token=tok-999 ({_LEAKY_MESSAGE})")


#: calls of ``leak_once`` so far
LEAK_CALLS: list[str] = []


@compensable(by="forget_lookup", idempotent=True)
def leak_once(key: str) -> str:
    """Idempotent: its first call raises with credentials in the message, then it answers."""
    LEAK_CALLS.append(key)
    if len(LEAK_CALLS) == 1:
        raise ConnectionError(_LEAKY_MESSAGE)
    return key


#: the credential ``issue_key`` returns: tools, compensations and models get it, no view shows it
ISSUED_KEY = "sk-issued-5e1f7c"


@compensable(by="revoke_key")
def issue_key(owner: str) -> dict[str, str]:
    """Returns a secret (``api_key``), which the journal redacts."""
    EFFECTS.append(f"issued {owner}")
    return {"owner": owner, "api_key": ISSUED_KEY}


def revoke_key(ctx: CompensationContext) -> None:
    EFFECTS.append(f"revoked {ctx.result['api_key']}")


#: a token ``open_account`` returns, which ``start_session`` takes by $ref
ACCOUNT_TOKEN = "tok-live-7f3a9c2e"
#: what ``open_account``, ``start_session``, ``grant_tokens`` and their undos were handed
RECEIVED: list[tuple[str, Any]] = []


@compensable(by="close_account")
def open_account(owner: str) -> dict[str, str]:
    """Returns a credential (``api_token``), which the journal must not hold."""
    RECEIVED.append(("open_account", owner))
    return {"account_id": f"acc-{owner}", "api_token": ACCOUNT_TOKEN}


def close_account(ctx: CompensationContext) -> None:
    RECEIVED.append(("close_account", ctx.result))


@compensable(by="stop_session")
def start_session(api_token: str) -> dict[str, str]:
    RECEIVED.append(("start_session", api_token))
    return {"session": "s-1"}


def stop_session(ctx: CompensationContext) -> None:
    RECEIVED.append(("stop_session", ctx.input["api_token"]))


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def grant_tokens(token_amount: int, account: str) -> str:
    """Irreversible; the default ``token`` rule hides ``token_amount`` from the journal."""
    RECEIVED.append(("grant_tokens", token_amount))
    return f"granted {token_amount}"


class Tally(TypedDict):
    """What ``count_stock`` declares it returns: its fields' types are known before it runs."""

    sku: str
    count: int


@compensable(by="uncount")
def count_stock(sku: str) -> Tally:
    """Returns a declared type (a TypedDict), so a $ref to its fields is checked up front."""
    EFFECTS.append(f"counted {sku}")
    return {"sku": sku, "count": 7}


def uncount(ctx: CompensationContext) -> None:
    EFFECTS.append(f"uncounted {ctx.input['sku']}")


@compensable(by="shred_report")
def big_report(size: int, api_token: str) -> str:
    """Returns ``size`` characters: more than a Temporal payload may carry when it is large.
    ``api_token`` is redacted from the journal by the default rules."""
    EFFECTS.append(f"reported {size}")
    return "r" * size


def shred_report(ctx: CompensationContext) -> None:
    EFFECTS.append(f"shredded {len(ctx.result)} with {ctx.input['api_token']}")


@compensable(by="drop_upload")
def upload(blob: str) -> str:
    """Takes a big argument and returns a small reference to it."""
    EFFECTS.append(f"uploaded {len(blob)}")
    return f"blob-{len(blob)}"


def drop_upload(ctx: CompensationContext) -> None:
    EFFECTS.append(f"dropped {ctx.result} ({len(ctx.input['blob'])})")


#: attempts each key's undo of ``lookup_late`` has made (the undo works from its third)
UNDO_TRIES: dict[str, int] = {}


@compensable(by="unlookup_late")
def lookup_late(key: str) -> dict[str, str]:
    """Its undo fails twice on a KeyError of its own code (not the context's), then works."""
    EFFECTS.append(f"lookup {key}")
    return {"key": key}


def unlookup_late(ctx: CompensationContext) -> None:
    key = ctx.result["key"]
    UNDO_TRIES[key] = UNDO_TRIES.get(key, 0) + 1
    registry: dict[str, int] = {key: 1} if UNDO_TRIES[key] > 2 else {}
    registry[key]  # a lookup in the undo's own data, which a retry may find
    EFFECTS.append(f"unlookup {key}")


@compensable(by="unbreak")
def breakable(key: str) -> dict[str, str]:
    """Its undo reads a field the result lacks, catches the KeyError and raises it again."""
    EFFECTS.append(f"breakable {key}")
    return {"key": key}


def unbreak(ctx: CompensationContext) -> None:
    EFFECTS.append(f"unbreak tried {ctx.input['key']}")
    try:
        ctx.result["no_such_field"]
    except KeyError:
        raise


@compensable(by="unecho")
def echo(value: Any) -> Any:
    """Returns its argument as its result, whatever shape it has."""
    return value


def unecho(ctx: CompensationContext) -> None:
    RECEIVED.append(("unecho", ctx.result))


@compensable(by="unslow_undo")
def slow_undo(key: str) -> str:
    """Its undo takes 3 s, long enough to terminate the saga while it runs."""
    EFFECTS.append(f"slow_undo {key}")
    return key


async def unslow_undo(ctx: CompensationContext) -> None:
    await asyncio.sleep(3)
    EFFECTS.append(f"undone {ctx.input['key']}")


TOOLS: list[CompensableTool[..., Any]] = [
    slow_undo,
    lookup_late,
    breakable,
    echo,
    big_report,
    upload,
    count_stock,
    wire,
    issue_key,
    open_account,
    start_session,
    grant_tokens,
    stall,
    slow_note,
    set_flag,
    send_note,
    post_notice,
    make_set,
    explode,
    decline,
    flaky_lookup,
    leak,
    leak_once,
]
