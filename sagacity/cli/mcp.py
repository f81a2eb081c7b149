"""``sagacity mcp``: the MCP gateway (see :mod:`sagacity.mcp.gateway`), over stdio or HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sagacity.cli._common import fail, settings_or_exit
from sagacity.cli._exit import hard_exit
from sagacity.errors import SagacityError

if TYPE_CHECKING:
    from sagacity.evidence.decisions import Keyring, Signer
    from sagacity.settings import Settings

__all__ = ["mcp"]

log = logging.getLogger("sagacity.mcp.gateway")


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


@hard_exit
def mcp(
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="The policy file: the upstream server, its tools, the session semantics.",
            show_default=False,
        ),
    ] = None,
    transport: Annotated[
        Transport, typer.Option("--transport", help="How MCP clients reach the gateway.")
    ] = Transport.stdio,
    host: Annotated[str, typer.Option("--host", help="HTTP: the address to listen on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="HTTP: the port.")] = 8931,
    accept_timeout: Annotated[
        float,
        typer.Option(
            "--accept-timeout",
            min=0.1,
            help="Seconds a call waits for a Sagacity worker to take it up; after that it is "
            "refused and never runs.",
        ),
    ] = 30.0,
    elicit_as: Annotated[
        str | None,
        typer.Option(
            "--elicit-approvals-as",
            help="Also ask the MCP client's user to approve calls that wait for approval "
            "(IRREVERSIBLE ones, and those a tool's needs_approval rule asks about; MCP "
            "elicitation, where the client supports it); answers are decisions of this approver, "
            "signed with SAGACITY_APPROVER_KEY. Off by default.",
            show_default=False,
        ),
    ] = None,
    shared_saga: Annotated[
        bool,
        typer.Option(
            "--shared-saga",
            help="Over HTTP, let clients without an MCP session (protocol 2026-07-28) share one "
            "saga, for a gateway with a single client; refused by default.",
        ),
    ] = False,
    observe: Annotated[
        bool,
        typer.Option(
            "--observe",
            help="Forward every call straight to the upstream (no saga) and write a policy "
            "skeleton of what was called to --write-policy.",
        ),
    ] = False,
    write_policy: Annotated[
        Path | None,
        typer.Option("--write-policy", help="Observe mode: where the skeleton goes."),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Observe mode without --policy: the upstream's name."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="Observe mode without --policy: a streamable HTTP upstream."),
    ] = None,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="Observe mode without --policy: a stdio upstream's command, after --.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve an upstream MCP server's tools to MCP clients, each client session a saga.

    Calls run as journaled steps on `sagacity worker --app sagacity.mcp.app` (same policy).

    IRREVERSIBLE calls, and calls a tool's needs_approval rule asks about, wait for an approval
    (the client is told why, and the command that approves).

    With --observe, calls go straight to the upstream and a policy skeleton is written.
    """
    from sagacity.mcp.policy import PolicyError, ServerSpec, load_policy

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="sagacity mcp: %(levelname)s %(message)s"
    )
    logging.getLogger("temporalio").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if observe:
        if write_policy is None:
            raise fail("--observe needs --write-policy FILE: where the policy skeleton goes")
        if _reviewed(write_policy):
            raise fail(
                f"--write-policy {write_policy}: refusing to overwrite a policy that is not an "
                "unreviewed skeleton; give another file"
            )
        if policy is not None:
            spec, folder = _policy_server(policy), policy.resolve().parent
        else:
            if name is None or (url is None) == (not command):
                raise fail(
                    "--observe needs --policy FILE, or --name NAME with --url URL or "
                    "-- COMMAND ... for the upstream"
                )
            try:
                spec = ServerSpec(name=name, url=url, command=command or None)
            except ValueError as exc:
                raise fail(f"upstream: {exc}") from None
            folder = Path.cwd()
        _run(_observe(spec, folder, write_policy, transport, host, port))
        return
    if policy is None:
        raise fail("give --policy FILE (or --observe to write one)")
    try:
        loaded = load_policy(policy)
    except PolicyError as exc:
        raise fail(str(exc)) from None
    _run(_gateway(loaded, transport, host, port, accept_timeout, elicit_as, shared_saga))


def _reviewed(path: Path) -> bool:
    """Whether ``path`` holds something other than an unreviewed skeleton (observe mode's own)."""
    try:
        return "reviewed: false" not in path.read_text()
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError):
        return True


def _policy_server(path: Path) -> Any:
    """The server block of a policy file, reviewed or not (observe mode only needs that)."""
    import yaml

    from sagacity.mcp.policy import ServerSpec

    try:
        data = yaml.safe_load(path.read_text())
        return ServerSpec.model_validate(data["server"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise fail(f"{path}: no usable server block: {exc}") from None


def _run(work: Awaitable[None]) -> None:
    try:
        asyncio.run(_until_signalled(work))
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


async def _until_signalled(work: Awaitable[None]) -> None:
    """Run ``work``; SIGTERM or SIGINT cancels it, so it closes cleanly (sessions end)."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _gateway(
    policy: Any,
    transport: Transport,
    host: str,
    port: int,
    accept_timeout: float,
    elicit_as: str | None,
    shared_saga: bool,
) -> None:
    from sagacity.approvals import ApprovalService
    from sagacity.mcp.gateway import Elicitation, Gateway
    from sagacity.mcp.policy import check_against
    from sagacity.mcp.serving import serve_http
    from sagacity.temporal.models import SagaOptions
    from sagacity.worker import connect_client

    settings = settings_or_exit()
    _refuse_clear_payloads(settings)
    # checked before anything starts: a key the keyring refuses would lose every answer
    asked = None if elicit_as is None else (elicit_as, *_elicitation_keys(settings, elicit_as))
    try:
        client = await connect_client(settings)
    except SagacityError:
        raise
    except Exception as exc:  # the SDK's connection errors are plain RuntimeErrors
        raise fail(
            f"cannot reach Temporal at {settings.temporal_address} "
            f"(namespace {settings.temporal_namespace}): {exc}",
            1,
        ) from None
    tools = await _upstream_tools(policy.server, policy.folder)
    check_against(policy, tools)
    elicitation = None
    if asked is not None:
        approver, signer, keyring = asked
        service = ApprovalService(
            client, approvers=settings.approvers, signer=signer, keyring=keyring
        )
        elicitation = Elicitation(service, approver)
    gateway = Gateway(
        policy,
        tools,
        client,
        settings.task_queue,
        accept_timeout_s=accept_timeout,
        elicitation=elicitation,
        shared_saga=shared_saga,
        # as `sagacity saga start`: a call waiting for approval waits the configured deadline
        options=SagaOptions(approval_deadline_s=settings.approval_deadline.total_seconds()),
    )
    log.info(
        "gateway for %s ready (%s): %d tools, task queue %s",
        policy.server.name,
        transport.value,
        len(gateway.tools),
        settings.task_queue,
    )
    try:
        if transport is Transport.http:
            await serve_http(gateway.http_app(host), host, port)
        else:
            await _serve(gateway.server(), transport, host, port)
    finally:
        await gateway.close()


def _elicitation_keys(settings: Settings, approver: str) -> tuple[Signer | None, Keyring | None]:
    """The key the client's decisions are signed with, and the keyring; exit 2 when the keyring
    would refuse a decision signed as ``approver`` (every answer would be lost, the call left
    waiting)."""
    from sagacity.cli._common import decision_keys_or_exit
    from sagacity.evidence.decisions import signer_refusal

    signer, keyring = decision_keys_or_exit(settings.approver_key, settings)
    why = signer_refusal(signer, keyring, approver)
    if why is None:
        return signer, keyring
    entry = keyring.find(signer.key_id) if keyring is not None and signer is not None else None
    may = f" (this key signs for {', '.join(entry.principals)})" if entry is not None else ""
    raise fail(
        f"--elicit-approvals-as {approver}: {why}, so every decision asked of the client would "
        f"be refused. Name an identity the key signs for{may}, or set SAGACITY_APPROVER_KEY to "
        f"a key the keyring ({settings.keyring}) trusts for {approver!r}."
    )


def _refuse_clear_payloads(settings: Settings) -> None:
    """Without codec keys, each call's arguments would reach Temporal's history in clear (and
    workers that encrypt could not be read): the gateway refuses, unless told that is meant."""
    from sagacity.settings import dev_codec_keys

    if settings.payload_codec() is not None:
        return
    where = (
        "SAGACITY_CODEC_KEYS, SAGACITY_CODEC_KEYS_FILE, or the dev stack's "
        f"{dev_codec_keys(settings.data_dir.resolve())} (written by `sagacity dev` in the "
        "folder it ran in; start the gateway there, or export the SAGACITY_CODEC_KEYS_FILE "
        "`sagacity dev` prints)"
    )
    if settings.production or not settings.allow_clear_payloads:
        raise fail(
            "refusing to start: no codec keys, so each call's arguments and results would "
            f"reach Temporal's history in clear. Keys are looked for in {where}."
            + (
                ""
                if settings.production
                else " To send payloads in clear on purpose, set SAGACITY_ALLOW_CLEAR_PAYLOADS=1."
            ),
            2,
        )
    log.warning("PAYLOADS IN CLEAR (SAGACITY_ALLOW_CLEAR_PAYLOADS): no codec keys in %s", where)


async def _observe(
    spec: Any, folder: Path, out: Path, transport: Transport, host: str, port: int
) -> None:
    import mcp_types as types

    from sagacity.errors import UpstreamToolError
    from sagacity.mcp.gateway import Observer
    from sagacity.mcp.upstream import Upstream

    async with Upstream(spec, folder=folder) as upstream:

        async def forward(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            try:
                return await upstream.call_raw(name, arguments)
            except UpstreamToolError as exc:
                return types.CallToolResult(
                    content=[types.TextContent(text=str(exc))], is_error=True
                )

        observer = Observer(spec, await upstream.list_tools(), forward, out)
        log.info("observing %s: every call forwarded; skeleton in %s", spec.name, out)
        async with observer.writing():
            await _serve(observer.server(), transport, host, port)


async def _upstream_tools(spec: Any, folder: Path) -> list[Any]:
    from sagacity.mcp.upstream import Upstream

    async with Upstream(spec, folder=folder) as upstream:
        return await upstream.list_tools()


async def _serve(server: Any, transport: Transport, host: str, port: int) -> None:
    if transport is Transport.stdio:
        from sagacity.mcp.stdio import serve_stdio

        await serve_stdio(server)
        return
    from sagacity.mcp.serving import serve_http

    await serve_http(server.streamable_http_app(host=host), host, port)
