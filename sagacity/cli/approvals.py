"""``sagacity approvals``: list pending gated calls, decide or sign for them, serve the HTTP API.

Decisions go through :class:`~sagacity.approvals.ApprovalService`, so ``SAGACITY_APPROVERS``
applies here as it does over HTTP. ``--as`` names the approver the journal records; each decision
is signed with ``SAGACITY_APPROVER_KEY`` (the worker refuses it unless ``SAGACITY_KEYRING`` trusts
that key for that approver); ``sign`` prints such a signed decision for another client (the
plain ``temporal`` CLI) to send. ``serve`` signs with ``SAGACITY_SERVICE_KEY`` on behalf of the
principal each request authenticated as.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from sagacity.approvals import ApprovalService, DecisionResult, Inbox, PendingRequest
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.console import WebConsole
from sagacity.approvals.halts import HaltService
from sagacity.approvals.http import create_app, openapi_document
from sagacity.approvals.oidc import OidcVerifier
from sagacity.approvals.service import MAX_PAGE, inbox_filter
from sagacity.cli._common import (
    checkpoints_or_exit,
    decision_keys_or_exit,
    duration_or_exit,
    fail,
    run_or_exit,
    service_settings_or_exit,
    signing_identity,
)
from sagacity.cli._exit import hard_exit
from sagacity.errors import InvalidInput
from sagacity.evidence.decisions import permitted
from sagacity.inputs import load_object
from sagacity.journal import to_json
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.store.halts import HaltStore
from sagacity.temporal.models import Decision, PendingApproval
from sagacity.worker import connect_client

__all__ = ["app"]

app = typer.Typer(
    name="approvals",
    help="Pending approvals of IRREVERSIBLE calls and calls a needs_approval rule asked about: "
    "list, show, approve, reject, sign, serve.",
    no_args_is_help=True,
)

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SagaArg = Annotated[str, typer.Argument(help="Saga (workflow) id.", show_default=False)]
SeqArg = Annotated[
    int,
    typer.Argument(
        min=1, max=2**63 - 1, help="Journal seq of the AWAITING_APPROVAL row.", show_default=False
    ),
]
RejectionMessage = Annotated[
    str | None,
    typer.Option(
        "--message",
        help="A message for whoever made the call (an agent's model gets it as the tool's "
        "result, to try another way); journaled and signed with REJECTED.",
        show_default=False,
    ),
]
Approver = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Who decides: recorded in the journal. Default: whom SAGACITY_APPROVER_KEY signs "
        "for in the keyring, else your user name.",
        show_default=False,
    ),
]


@contextlib.asynccontextmanager
async def _service(settings: Settings, key: Path | None) -> AsyncIterator[ApprovalService]:
    """The service, signing decisions with ``key``: the approver's own for the CLI, the
    service's for the HTTP API (never a person's key for decisions others made)."""
    assert settings.database_url
    signer, keyring = decision_keys_or_exit(key, settings)
    pool = await open_pool(settings.database_url, min_size=1, max_size=4)
    try:
        client = await connect_client(settings)
        yield ApprovalService(
            client,
            ApprovalStore(pool),
            approvers=settings.approvers,
            resolvers=settings.resolvers,
            signer=signer,
            keyring=keyring,
            journal=JournalStore(pool),
        )
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def _halt_store(settings: Settings, service: ApprovalService) -> AsyncIterator[HaltStore]:
    """Halts as the console writes them: as the tables' owner when its URL is set (the worker's
    login only reads them, and the Operations page says so when asked to halt)."""
    assert service.journal is not None
    if settings.owner_database_url is None:
        yield HaltStore(service.journal.pool)
        return
    pool = await open_pool(settings.owner_database_url, min_size=1, max_size=2)
    try:
        yield HaltStore(pool)
    finally:
        await pool.close()


def _print_json(value: BaseModel | Sequence[BaseModel]) -> None:
    data = (
        value.model_dump(mode="json")
        if isinstance(value, BaseModel)
        else [v.model_dump(mode="json") for v in value]
    )
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _flags(req: PendingRequest) -> str:
    if not req.intact:
        return "ALTERED: approving it will not run it"
    flags = "waiting" if req.waiting else f"not waiting ({req.workflow_status})"
    if req.escalation is not None:
        flags += f", escalated {req.escalation.at:%Y-%m-%d %H:%M:%S}"
    return flags


def _escalated(req: PendingRequest) -> str:
    """When and where the request was escalated, and how the notification went."""
    esc = req.escalation
    if esc is None:
        return "-"
    where = f" to {esc.to}" if esc.to else " (no webhook: recorded only)"
    tries = f", {esc.attempts} attempt{'s' if esc.attempts != 1 else ''}" if esc.attempts else ""
    error = f": {esc.error}" if esc.error else ""
    return f"{esc.at.isoformat()}{where}, {esc.state}{tries}{error}"


@app.command("list")
@hard_exit
def list_command(
    saga: Annotated[str | None, typer.Option("--saga", help="Only this saga's requests.")] = None,
    tool: Annotated[
        list[str] | None, typer.Option("--tool", help="Only calls of this tool (repeatable).")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Only requests waiting this long: PT2H, P1D, seconds."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_PAGE, help="Requests per page.")
    ] = 50,
    after: Annotated[
        str | None, typer.Option("--after", help="Where the previous page said to go on.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Pending requests a page at a time, oldest first, with what each saga is doing now."""
    settings = service_settings_or_exit()
    age = None if older_than is None else duration_or_exit("--older-than", older_than)
    where = inbox_filter(
        tools=tool, saga_id=saga, older_than_s=None if age is None else age.total_seconds()
    )

    async def work() -> Inbox:
        async with _service(settings, settings.approver_key) as service:
            return await service.inbox(where, after=after, limit=limit)

    inbox = run_or_exit(work())
    if as_json:
        _print_json(inbox)
        return
    if not inbox.requests:
        typer.echo("no approvals pending" if not inbox.total else "no more on this page")
        return
    table = Table()
    # ids fold rather than end in "…": they are what the next command is given
    for name in ("saga", "seq", "tool", "input"):
        table.add_column(name, overflow="fold")
    for name in ("input hash", "requested (UTC)", "deadline (UTC)", "status"):
        table.add_column(name)
    for r in inbox.requests:
        table.add_row(
            r.saga_id,
            str(r.journal_seq),
            "\n".join(
                [r.tool_name]
                + ([f"({r.why})"] if r.why is not None else [])
                + ([r.approvals.line] if r.approvals is not None else [])
            ),
            r.input,
            r.input_hash[:12] + "…",
            f"{r.requested_at:%Y-%m-%d %H:%M:%S}",
            "-" if r.deadline is None else f"{r.deadline:%Y-%m-%d %H:%M:%S}",
            _flags(r),
        )
    # a pipe gets 80 columns by default: too few for the ids
    Console(width=max(Console().width, 160)).print(table)
    tools = ", ".join(f"{name} {n}" for name, n in sorted(inbox.by_tool.items()))
    typer.echo(f"{len(inbox.requests)} shown of {inbox.total} pending ({tools})")
    if inbox.next is not None:
        typer.echo(f"next page: --after {inbox.next}")


@app.command("show")
@hard_exit
def show_command(saga_id: SagaArg, seq: SeqArg, as_json: AsJson = False) -> None:
    """One request in full: its input, hash, deadline and whether the saga still waits for it."""
    settings = service_settings_or_exit()

    async def work() -> PendingRequest:
        async with _service(settings, settings.approver_key) as service:
            return await service.get(saga_id, seq)

    request = run_or_exit(work())
    if as_json:
        _print_json(request)
        return
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, value in (
        ("saga", request.saga_id),
        ("seq", str(request.journal_seq)),
        ("tool", request.tool_name),
        ("asked by", request.why or "-"),
        ("approvals", request.approvals.line if request.approvals else "-"),
        ("input", request.input),
        ("hidden", ", ".join(request.hidden) or "-"),
        ("input hash", request.input_hash),
        ("requested", request.requested_at.isoformat()),
        ("deadline", request.deadline.isoformat() if request.deadline else "-"),
        ("escalated", _escalated(request)),
        ("saga state", request.saga_state.value if request.saga_state else "-"),
        ("status", _flags(request)),
    ):
        table.add_row(label, value)
    Console().print(table)


def _report(result: DecisionResult, as_json: bool) -> None:
    if as_json:
        _print_json(result)
        return
    why = f": {result.reason}" if result.reason else ""
    typer.echo(
        f"{result.decision} {result.tool_name} (saga {result.saga_id}, seq {result.journal_seq}) "
        f"as {result.approver}{why}"
    )
    if result.message is not None:
        typer.echo(f"message: {result.message}")
    if result.awaiting is not None:
        typer.echo(f"{result.awaiting} approvals in: the request waits for more")


#: approve with changes: the arguments, as JSON text or in a file
EditArgs = Annotated[
    str | None,
    typer.Option(
        "--args",
        help="Approve with changes: the arguments the call runs with instead (a JSON object). "
        "The saga checks them against the tool first; the journal keeps both.",
        show_default=False,
    ),
]
EditArgsFile = Annotated[
    Path | None,
    typer.Option(
        "--args-file", help="As --args, read from this file ('-': stdin).", show_default=False
    ),
]


def _edited_args(text: str | None, path: Path | None) -> dict[str, Any] | None:
    """The edited arguments ``--args`` or ``--args-file`` give (None: approved as proposed)."""
    if text is not None and path is not None:
        raise fail("give --args or --args-file, not both")
    if path is not None:
        try:
            text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read --args-file {path}: {exc}") from None
    if text is None:
        return None
    try:
        return load_object(text, what="--args")
    except InvalidInput as exc:
        raise fail(str(exc)) from None


@app.command("approve")
@hard_exit
def approve_command(
    saga_id: SagaArg,
    seq: SeqArg,
    approver: Approver = None,
    input_hash: Annotated[
        str | None,
        typer.Option("--input-hash", help="Approve only if this is the hash of the input to run."),
    ] = None,
    args_text: EditArgs = None,
    args_file: EditArgsFile = None,
    as_json: AsJson = False,
) -> None:
    """Approve the call, as proposed or with changed arguments (--args); it runs once APPROVED
    is journaled."""
    settings = service_settings_or_exit()
    args = _edited_args(args_text, args_file)

    async def work() -> DecisionResult:
        async with _service(settings, settings.approver_key) as service:
            who = approver or signing_identity(service.signer, service.keyring)
            return await service.approve(
                saga_id, seq, approver=who, input_hash=input_hash, args=args
            )

    _report(run_or_exit(work()), as_json)


@app.command("reject")
@hard_exit
def reject_command(
    saga_id: SagaArg,
    seq: SeqArg,
    reason: Annotated[str, typer.Option("--reason", help="Journaled with REJECTED.")],
    message: RejectionMessage = None,
    approver: Approver = None,
    as_json: AsJson = False,
) -> None:
    """Reject the call; the saga compensates what ran before it (an agent's model is told,
    with the message, and may try another way)."""
    settings = service_settings_or_exit()

    async def work() -> DecisionResult:
        async with _service(settings, settings.approver_key) as service:
            return await service.reject(
                saga_id,
                seq,
                approver=approver or signing_identity(service.signer, service.keyring),
                reason=reason,
                message=message,
            )

    _report(run_or_exit(work()), as_json)


@app.command("sign")
@hard_exit
def sign_command(
    saga_id: SagaArg,
    seq: SeqArg,
    approve: Annotated[
        bool,
        typer.Option("--approve/--reject", help="The decision to sign.", show_default=False),
    ],
    reason: Annotated[
        str | None, typer.Option("--reason", help="A rejection's reason (signed with it).")
    ] = None,
    message: RejectionMessage = None,
    approver: Approver = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="Ed25519 private key (PEM) to sign with. Default: SAGACITY_APPROVER_KEY "
            "(`sagacity dev` exports the dev stack's).",
            show_default=False,
        ),
    ] = None,
    route: Annotated[
        Literal["signal", "update"],
        typer.Option(
            "--for",
            help="signal: the approve or reject signal's input; update: the decide update's.",
        ),
    ] = "signal",
    json_only: Annotated[
        bool, typer.Option("--json-only", help="Print nothing on stderr, only the JSON.")
    ] = False,
    args_text: EditArgs = None,
    args_file: EditArgsFile = None,
) -> None:
    """Print a signed approval or rejection for another client to send, without sending it:
    signed over the input hash of the request the saga waits with at SEQ, and checked as
    `approve` and `reject` check theirs. The JSON (stdout) is the `--input` of the `approve` or
    `reject` signal, or with `--for update` of the `decide` update; what was signed, and the
    `temporal` command that sends it, go to stderr.

    temporal workflow signal --workflow-id ID --name approve \\
      --input "$(sagacity approvals sign ID SEQ --approve)"
    """
    settings = service_settings_or_exit()
    key = key or settings.approver_key
    if reason is not None and approve:
        raise fail("--reason goes with --reject: an approval carries none")
    if message is not None and approve:
        raise fail("--message goes with --reject: an approval carries none")
    if key is None:
        raise fail("no key to sign with: give --key or set SAGACITY_APPROVER_KEY")
    args = _edited_args(args_text, args_file)
    if args is not None and not approve:
        raise fail("--args goes with --approve: a rejection changes nothing")

    async def work() -> tuple[Decision, PendingApproval]:
        async with _service(settings, key) as service:
            who = approver or signing_identity(service.signer, service.keyring)
            return await service.sign(
                saga_id,
                seq,
                approver=who,
                approve=approve,
                reason=reason,
                message=message,
                args=args,
            )

    decision, pending = run_or_exit(work())
    assert decision.signature is not None and settings.temporal_address
    if route == "update":  # an approval's reason is neither signed nor journaled: left out
        body = decision.model_dump(mode="json", exclude={"reason"} if decision.approve else None)
    else:
        body = decision.as_signal().model_dump(mode="json")
    # the decision first, then what proves it: the order a reader checks them in
    body = dict(sorted(body.items(), key=lambda item: item[0] in ("input_hash", "signature")))
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    typer.echo(text)
    if json_only:
        return
    verb = "approve" if decision.approve else "reject"
    name = "decide" if route == "update" else verb
    send = ["temporal", "workflow", *(["update", "execute"] if route == "update" else ["signal"])]
    send += ["--address", settings.temporal_address, "--namespace"]
    send += [settings.temporal_namespace, "--workflow-id", saga_id, "--name", name]
    send += ["--input", text]
    said = [
        f"signed: {verb} {pending.tool_name} (saga {saga_id}, seq {seq}) as {decision.approver} "
        f"with key {decision.signature.key_id}",
        f"input: {pending.input_json}",
        f"input hash: {pending.input_hash}",
        *([f"approved with changes: {to_json(args)}"] if args is not None else []),
        "send it with:",
        f"  {shlex.join(send)}",
    ]
    if route == "update":
        said.append(
            "  (its answer is encrypted: add --codec-endpoint <approvals API>/codec "
            "--codec-auth 'Bearer <token>' to read it)"
        )
    typer.echo("\n".join(said), err=True)


@app.command("serve")
@hard_exit
def serve_command(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 8080,
) -> None:
    """Run the HTTP API, the web console (/console) and the codec server until Ctrl-C or SIGTERM
    (bearer tokens from SAGACITY_APPROVAL_TOKENS, JWTs with SAGACITY_OIDC_*; decisions signed
    with SAGACITY_SERVICE_KEY)."""
    import uvicorn

    from sagacity.cli._serving import Server

    settings = service_settings_or_exit()
    tokens = settings.approval_tokens or {}
    oidc = _oidc(settings)
    if not tokens and oidc is None:
        raise fail("set SAGACITY_APPROVAL_TOKENS (token=principal,...) or SAGACITY_OIDC_JWKS_URL")
    if settings.keyring is not None and settings.service_key is None:
        raise fail("a keyring is configured: set SAGACITY_SERVICE_KEY, the key the API signs with")

    async def work() -> None:
        payload_codec = settings.payload_codec()
        codec = None
        if payload_codec is not None:
            codec = CodecServer(
                payload_codec,
                decoders=settings.codec_decoders,
                namespace=settings.temporal_namespace,
                cors_origins=settings.codec_cors_origins,
            )
        async with (
            _service(settings, settings.service_key) as service,
            _halt_store(settings, service) as halts,
        ):
            assert service.journal is not None
            web = WebConsole(
                service,
                service.journal,
                checkpoints=checkpoints_or_exit(settings),
                keyring_file=settings.keyring,
                halts=HaltService(
                    service.client,
                    halts,
                    service.journal,
                    signer=service.signer,
                    keyring=service.keyring,
                ),
                # who may decide every tool may halt them all, and roll ended sagas back
                operators=permitted(settings.approvers, "*"),
                task_queue=settings.task_queue,
            )
            api = create_app(service, tokens, oidc=oidc, codec=codec, web=web)
            await Server(uvicorn.Config(api, host=host, port=port)).serve()

    run_or_exit(work())


def _oidc(settings: Settings) -> OidcVerifier | None:
    """The JWT verifier the OIDC settings describe; exit 2 when they are incomplete."""
    if settings.oidc_jwks_url is None:
        return None
    if not (settings.oidc_issuer and settings.oidc_audience):
        raise fail("SAGACITY_OIDC_JWKS_URL needs SAGACITY_OIDC_ISSUER and SAGACITY_OIDC_AUDIENCE")
    return OidcVerifier(
        settings.oidc_jwks_url,
        issuer=settings.oidc_issuer,
        audience=settings.oidc_audience,
        algorithms=[a.strip() for a in settings.oidc_algorithms.split(",") if a.strip()],
        principal_claim=settings.oidc_principal_claim,
    )


@app.command("openapi")
def openapi_command() -> None:
    """Print the HTTP API's OpenAPI document (docs/approvals-openapi.json is this output)."""
    typer.echo(json.dumps(openapi_document(), indent=2, ensure_ascii=False))
