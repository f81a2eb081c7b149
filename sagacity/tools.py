"""Declaring tools: ``@compensable``, the compensation context, and the registry that checks them.

A tool is a plain function (sync or async). Its declaration says how its effect is undone:

* REVERSIBLE: the compensation restores the prior state exactly (release a reservation);
* COMPENSATABLE: the compensation is an imperfect, visible undo (a correction email);
* IRREVERSIBLE: nothing undoes it, so a named human approves each call before it runs.

Any tool may also declare a probe (``@tool.probe``): a read-only look at the external system that
says whether a call's effect exists, which ``sagacity reconcile`` compares with the journal.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from sagacity.errors import ToolArgumentsInvalid, ToolDeclarationError, UnknownTool

P = ParamSpec("P")
R = TypeVar("R")


class Reversibility(StrEnum):
    """How completely a tool's effect can be undone."""

    REVERSIBLE = "REVERSIBLE"
    COMPENSATABLE = "COMPENSATABLE"
    IRREVERSIBLE = "IRREVERSIBLE"


@dataclass(frozen=True, slots=True)
class _JournaledCall:
    """A call as its journal rows tell it, to whoever acts on its effect."""

    saga_id: str
    #: journal seq of the call's INTENT row
    seq: int
    tool_name: str
    #: the call's arguments, as journaled
    input: dict[str, Any]
    #: the call's result, as journaled (JSON data); None when it did not execute
    result: Any


@dataclass(frozen=True, slots=True)
class CompensationContext(_JournaledCall):
    """What a compensation sees of the call it undoes."""

    #: which attempt at compensating this is (1 on the first try)
    attempt: int = 1
    #: the call FAILED and may or may not have taken effect (``result`` is None): undo whatever
    #: exists, and do nothing when there is nothing
    failed: bool = False


Compensation = Callable[[CompensationContext], Any | Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ProbeContext(_JournaledCall):
    """What a probe sees of the call whose effect it looks for in the external system.

    ``result`` is None when the call failed or has no outcome (SUSPECT): look for the effect by
    what the call derives from ``saga_id`` and ``seq``.
    """


@dataclass(frozen=True, slots=True)
class Found:
    """A probe's answer "the effect exists", with what the call returned (as the tool would have).

    A SUSPECT call resolved from it as happened gets ``result`` as its result: what later steps
    and its compensation receive. A plain ``True`` says the effect exists and nothing more.
    """

    result: Any = None


#: a read-only look in the external system: True (or :class:`Found`) when the call's effect exists
Probe = Callable[[ProbeContext], bool | Found | Awaitable[bool | Found]]


@dataclass(frozen=True, slots=True)
class ToolOptions:
    """Per-tool execution settings; all optional."""

    #: a tool whose repeat is harmless may be retried by Temporal, even after a crash mid-call
    idempotent: bool = False
    #: how long one attempt may run
    timeout: timedelta = timedelta(minutes=5)
    #: a worker that stops heartbeating this long is taken as dead
    heartbeat_timeout: timedelta = timedelta(seconds=30)
    #: exceptions that mean the call failed without any effect (:class:`~sagacity.errors.NoEffect`
    #: always does); any other failure leaves the effect unknown, so it is compensated
    no_effect_on: tuple[type[BaseException], ...] = ()


class CompensableTool(Generic[P, R]):
    """A declared tool: callable as the function it wraps, plus its undo and options."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None,
        description: str | None,
        reversibility: Reversibility,
        by: Compensation | str | None,
        options: ToolOptions,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description or inspect.getdoc(fn) or self.name
        self.reversibility = reversibility
        self.options = options
        self._by = by
        self._probe: Probe | None = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name} {self.reversibility.value}>"

    def compensation(self, fn: Compensation) -> Compensation:
        """Decorator form of ``by=``: ``@reserve_inventory.compensation``."""
        self._by = fn
        return fn

    def probe(self, fn: Probe) -> Probe:
        """Declare how to tell whether a call's effect exists: ``@create_order.probe``.

        The probe gets a :class:`ProbeContext` and returns True (or :class:`Found`) when the
        effect is there now, False when it is not; it must only read. ``sagacity reconcile``
        runs it to compare the journal with the world.
        """
        self._probe = fn
        return fn

    @property
    def declared_compensation(self) -> Compensation | str | None:
        return self._by

    @property
    def declared_probe(self) -> Probe | None:
        return self._probe

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


@overload
def compensable(fn: Callable[P, R], /) -> CompensableTool[P, R]: ...
@overload
def compensable(
    *,
    by: Compensation | str | None = None,
    reversibility: Reversibility | None = None,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    no_effect_on: tuple[type[BaseException], ...] = (),
) -> Callable[[Callable[P, R]], CompensableTool[P, R]]: ...
def compensable(
    fn: Callable[P, R] | None = None,
    /,
    *,
    by: Compensation | str | None = None,
    reversibility: Reversibility | None = None,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    no_effect_on: tuple[type[BaseException], ...] = (),
) -> CompensableTool[P, R] | Callable[[Callable[P, R]], CompensableTool[P, R]]:
    """Declare a tool and its undo.

    ``by`` is the compensation: a function taking a :class:`CompensationContext`, or the name of
    such a function in the tool's module. Reversibility defaults to REVERSIBLE. Mistakes are
    reported when a :class:`ToolRegistry` is built (at worker start), naming the tool and the fix.
    ``no_effect_on`` lists exception types after which the call is known to have done nothing;
    any other failure is compensated too, since its effect is unknown.
    """
    defaults = ToolOptions()
    options = ToolOptions(
        idempotent=idempotent,
        timeout=timeout or defaults.timeout,
        heartbeat_timeout=heartbeat_timeout or defaults.heartbeat_timeout,
        no_effect_on=tuple(no_effect_on),
    )

    def wrap(f: Callable[P, R]) -> CompensableTool[P, R]:
        return CompensableTool(
            f,
            name=name,
            description=description,
            reversibility=reversibility or Reversibility.REVERSIBLE,
            by=by,
            options=options,
        )

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True)
class RegisteredTool:
    """A tool that passed the registry's checks, with its compensation resolved."""

    tool: CompensableTool[..., Any]
    compensation: Compensation | None
    arguments: type[BaseModel]
    params_schema: dict[str, Any] = field(default_factory=dict)
    probe: Probe | None = None

    @property
    def name(self) -> str:
        return self.tool.name

    def bind(self, args: dict[str, Any]) -> dict[str, Any]:
        """Validate JSON arguments against the tool's signature; returns typed keyword arguments."""
        try:
            model = self.arguments.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolArgumentsInvalid(
                f"arguments for tool {self.name!r} do not match its signature: {problems}"
            ) from None
        return {k: getattr(model, k) for k in type(model).model_fields}


class ToolRegistry:
    """The tools a worker serves, checked once so mistakes surface at start, not mid-saga."""

    def __init__(self, tools: Iterable[CompensableTool[..., Any]]) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        for tool in tools:
            if not isinstance(tool, CompensableTool):
                raise ToolDeclarationError(
                    f"{tool!r} is not a declared tool: decorate it with @compensable"
                )
            if tool.name in self._tools:
                other = self._tools[tool.name].tool.fn
                raise ToolDeclarationError(
                    f"two tools are named {tool.name!r} ({_where(other)} and {_where(tool.fn)}): "
                    "pass name=... to one of them"
                )
            self._tools[tool.name] = _register(tool)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def get(self, name: str) -> RegisteredTool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownTool(f"no tool named {name!r} is registered (known: {known})") from None


def _where(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _register(tool: CompensableTool[..., Any]) -> RegisteredTool:
    compensation = _resolve_compensation(tool)
    if tool.reversibility is Reversibility.IRREVERSIBLE and compensation is not None:
        raise ToolDeclarationError(
            f"tool {tool.name!r} is IRREVERSIBLE but declares a compensation: "
            "an imperfect undo makes it COMPENSATABLE"
        )
    if tool.reversibility is not Reversibility.IRREVERSIBLE and compensation is None:
        raise ToolDeclarationError(
            f"tool {tool.name!r} is {tool.reversibility.value} but declares no compensation: "
            f"add by=<function> or @{tool.fn.__name__}.compensation, "
            "or declare reversibility=Reversibility.IRREVERSIBLE"
        )
    if compensation is not None:
        _check_takes_context(tool.name, compensation, "compensation", "CompensationContext")
    probe = tool.declared_probe
    if probe is not None:
        _check_takes_context(tool.name, probe, "probe", "ProbeContext")
    arguments = _arguments_model(tool)
    return RegisteredTool(tool, compensation, arguments, arguments.model_json_schema(), probe)


def _resolve_compensation(tool: CompensableTool[..., Any]) -> Compensation | None:
    declared = tool.declared_compensation
    if declared is None or callable(declared):
        return declared
    module = sys.modules.get(tool.fn.__module__)
    found = getattr(module, declared, None)
    if not callable(found):
        raise ToolDeclarationError(
            f"tool {tool.name!r} names compensation {declared!r}, "
            f"but module {tool.fn.__module__} has no such function: define it there or pass by=<function>"
        )
    resolved: Compensation = found
    return resolved


def _check_takes_context(tool_name: str, fn: Callable[..., Any], role: str, context: str) -> None:
    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        name = getattr(fn, "__name__", repr(fn))
        returns = "bool" if role == "probe" else "None"
        raise ToolDeclarationError(
            f"{role} {name!r} of tool {tool_name!r} cannot take the context: "
            f"declare it as def {name}(ctx: {context}) -> {returns}"
        ) from None


def _arguments_model(tool: CompensableTool[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for param in inspect.signature(tool.fn, eval_str=True).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolDeclarationError(
                f"tool {tool.name!r} has parameter {param.name!r} of kind {param.kind.description}: "
                "tool parameters must be nameable (plain or keyword-only)"
            )
        annotation = Any if param.annotation is param.empty else param.annotation
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    try:
        return create_model(
            f"{tool.name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
    except Exception as exc:  # pydantic refuses some annotations; say which tool
        raise ToolDeclarationError(
            f"tool {tool.name!r} has parameters pydantic cannot describe: {exc}"
        ) from None


@dataclass(frozen=True, slots=True)
class CallInfo:
    """Which saga call a tool is running for (for idempotency keys or logs)."""

    saga_id: str
    seq: int
    attempt: int


_CALL: ContextVar[CallInfo | None] = ContextVar("sagacity_call", default=None)


def current_call() -> CallInfo:
    """The saga call the running tool belongs to; raises ``LookupError`` outside a saga."""
    info = _CALL.get()
    if info is None:
        raise LookupError("no saga call is running in this context")
    return info


def set_current_call(info: CallInfo) -> Token[CallInfo | None]:
    return _CALL.set(info)


def reset_current_call(token: Token[CallInfo | None]) -> None:
    _CALL.reset(token)
