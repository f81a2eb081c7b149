"""Declaring tools: ``@compensable``, the compensation context, and the registry that checks them.

A tool is a plain function (sync or async). Its declaration says how its effect is undone:

* REVERSIBLE: the compensation restores the prior state exactly (release a reservation);
* COMPENSATABLE: the compensation is an imperfect, visible undo (a correction email);
* IRREVERSIBLE: nothing undoes it, so a named human approves each call before it runs.

Any tool may also declare a probe (``@tool.probe``): a read-only look at the external system that
says whether a call's effect exists, which ``sagacity reconcile`` compares with the journal.

A tool may be a method of a class whose instance holds what the tools need (a connection pool):
declare the methods in the class body, build the instance, and register ``tools_of(instance)``.
Compensations and probes named or decorated in the class body are that instance's methods too.
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from types import MethodType, ModuleType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Self,
    TypeVar,
    cast,
    overload,
)
from urllib.parse import urljoin

import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from sagacity.approval_policy import ApprovalPolicy, policy_refusal
from sagacity.errors import (
    ContextKeyMissing,
    ToolArgumentsInvalid,
    ToolDeclarationError,
    UnknownTool,
)
from sagacity.rules import ALWAYS, ApprovalRule, refusal

P = ParamSpec("P")
R = TypeVar("R")
# covariant: an async tool, whose result pyright types as CoroutineType, is a tool giving a
# Coroutine, so an Awaitable, which a saga's typed call awaits (see typed_call)
R_co = TypeVar("R_co", covariant=True)
Q = ParamSpec("Q")
S = TypeVar("S")
T = TypeVar("T")


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
    """What a compensation sees of the call it undoes.

    A key missing from ``input`` or ``result`` (at any depth of their JSON objects) raises
    :class:`~sagacity.errors.ContextKeyMissing`, a ``KeyError`` that fails the compensation at
    once rather than retrying it: the data will not change. ``.get()`` still returns a default.
    """

    #: which attempt at compensating this is (1 on the first try)
    attempt: int = 1
    #: the call FAILED and may or may not have taken effect (``result`` is None): undo whatever
    #: exists, and do nothing when there is nothing
    failed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", _fields(self.input, "input"))
        object.__setattr__(self, "result", _fields(self.result, "result"))


class _Fields(dict[str, Any]):
    """A JSON object of a compensation's context: a missing key is the undo's own mistake."""

    __slots__ = ("where",)
    where: str

    def __missing__(self, key: str) -> Any:
        raise ContextKeyMissing(key, self.where)


def _fields(value: Any, where: str) -> Any:
    """``value`` with each JSON object in it (at any depth) a :class:`_Fields` naming ``where``."""

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            fields = _Fields(node)
            fields.where = where
            return fields
        return list(node) if isinstance(node, list) else node

    top = convert(value)
    # iterative: a deeply nested result must not make the undo fail on recursion
    stack: list[Any] = [top]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                node[key] = convert(child)
            stack.extend(node.values())
        elif isinstance(node, list):
            node[:] = map(convert, node)
            stack.extend(node)
    return top


Compensation = Callable[[CompensationContext], Any | Awaitable[Any]]
#: a compensation declared in a class body: a method of the tool's own instance
MethodCompensation = Callable[[Any, CompensationContext], Any | Awaitable[Any]]
C = TypeVar("C", bound=Compensation | MethodCompensation)


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
MethodProbe = Callable[[Any, ProbeContext], bool | Found | Awaitable[bool | Found]]
PR = TypeVar("PR", bound=Probe | MethodProbe)


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
    #: when a call waits for a human first (an IRREVERSIBLE tool's calls always do)
    approval: ApprovalRule | None = None
    #: a call's approval request still undecided after this is escalated: the
    #: next tier is notified once, and the saga waits on until its deadline (None: never)
    approval_sla: timedelta | None = None
    #: how many distinct approvers of which group each gated call needs (None: one)
    approval_policy: ApprovalPolicy | None = None


@dataclass(frozen=True, slots=True)
class JsonArguments:
    """Arguments a tool describes with a JSON schema of its own instead of its signature (an
    Agents SDK ``FunctionTool`` brings one); the registry checks calls with ``problems``."""

    schema: dict[str, Any]
    #: what is wrong with a call's arguments, one line each; empty when they fit
    problems: Callable[[dict[str, Any]], list[str]]

    @classmethod
    def of(cls, schema: Any, *, owner: str, field: str = "schema") -> JsonArguments:
        """Arguments checked against ``schema`` (JSON Schema 2020-12), which must describe a
        JSON object and resolve every ``$ref``: a call's arguments are checked with it before
        the call, so it must never fail to check. ``owner`` and ``field`` name the schema in
        the :class:`~sagacity.errors.ToolDeclarationError` raised otherwise
        ("FunctionTool 'ship'", "params_json_schema")."""
        validator = _validator(schema, f"{owner} has", field)

        def problems(arguments: dict[str, Any]) -> list[str]:
            return [
                f"{'.'.join(str(p) for p in error.absolute_path) or '(arguments)'}: {error.message}"
                for error in sorted(
                    validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path]
                )
            ]

        return cls(schema, problems)


def _validator(schema: Any, owner_has: str, field: str) -> jsonschema.Draft202012Validator:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        kind = schema.get("type") if isinstance(schema, dict) else type(schema).__name__
        raise ToolDeclarationError(
            f"{owner_has} a {field} of type {kind!r}: a tool's arguments are a JSON object, so "
            'its schema needs "type": "object"'
        )
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ToolDeclarationError(f"{owner_has} an invalid {field}: {exc.message}") from None
    resource = DRAFT202012.create_resource(schema)
    base = resource.id() or ""
    registry: Registry[Any] = Registry().with_resource(base, resource).crawl()
    for ref, within in _refs(schema, base):
        try:
            registry.resolver(within).lookup(ref)
        except Unresolvable:
            raise ToolDeclarationError(
                f"{owner_has} a {field} whose $ref {ref!r} points nowhere: define what it "
                "names in the schema itself (under $defs), or replace the $ref with the schema "
                "it stands for"
            ) from None
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


#: keywords whose values are data, not schemas: a "$ref" inside them is not a reference
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def _refs(node: Any, base: str) -> Iterator[tuple[str, str]]:
    """Each ``$ref`` (and ``$dynamicRef``) in the schema ``node``, with the base URI it resolves
    against (a subschema with its own ``$id`` is a base of its own)."""
    if isinstance(node, list):
        for item in node:
            yield from _refs(item, base)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("$id"), str):
        base = urljoin(base, node["$id"])
    for keyword in ("$ref", "$dynamicRef"):
        if isinstance(node.get(keyword), str):
            yield node[keyword], base
    for key, value in node.items():
        if key not in _DATA_KEYWORDS:
            yield from _refs(value, base)


class CompensableTool(Generic[P, R_co]):
    """A declared tool: callable as the function it wraps, plus its undo and options.

    Declared on a method, the class attribute (``Bookings.book_flight``) is the declaration and
    calls the plain function (``self`` first); read from an instance (``bookings.book_flight``)
    it is that instance's tool: ``fn`` is the bound method and its compensation and probe, when
    they are methods of the class, are bound to the same instance.
    """

    def __init__(
        self,
        fn: Callable[P, R_co],
        *,
        name: str | None,
        description: str | None,
        reversibility: Reversibility,
        by: Compensation | MethodCompensation | str | None,
        options: ToolOptions,
        json_arguments: JsonArguments | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description or inspect.getdoc(fn) or self.name
        self.reversibility = reversibility
        self.options = options
        self.json_arguments = json_arguments
        self._by = by
        self._probe: Probe | MethodProbe | None = None
        #: the class whose body declares this tool as a method (set when the class is made)
        self._owner: type | None = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        return self.fn(*args, **kwargs)

    if TYPE_CHECKING:
        # what a saga's typed call of this tool takes and gives (tooltyping.TypedTool), for
        # type checkers only: unwrapping an awaitable result here keeps Saga.call a single
        # signature, so mypy names a wrong argument rather than "no overload variant matches"
        @overload
        def typed_call(
            self: CompensableTool[Q, Awaitable[S]], *args: Q.args, **kwargs: Q.kwargs
        ) -> S: ...
        @overload
        def typed_call(self: CompensableTool[Q, S], *args: Q.args, **kwargs: Q.kwargs) -> S: ...
        def typed_call(self, *args: Any, **kwargs: Any) -> Any: ...

    def __repr__(self) -> str:
        return f"<tool {self.name} {self.reversibility.value}>"

    def __set_name__(self, owner: type, attribute: str) -> None:
        # only the tool whose function the class body itself defines is a method: a module-level
        # tool merely stored on a class, or a static method, keeps its plain signature
        if isinstance(self.fn, staticmethod | classmethod):
            return
        if getattr(self.fn, "__qualname__", None) == f"{owner.__qualname__}.{self.fn.__name__}":
            self._owner = owner
            # what the class attribute is, so workflow code can name it in a typed call
            self.__class__ = MethodTool

    @overload
    def __get__(
        self: CompensableTool[Concatenate[T, Q], S], instance: None, owner: type[T]
    ) -> MethodTool[T, Q, S]: ...
    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(
        self: CompensableTool[Concatenate[T, Q], S], instance: T, owner: type | None = None
    ) -> CompensableTool[Q, S]: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None or self._owner is None:
            return self
        return self._bound_to(instance)

    def _bound_to(self, instance: object) -> CompensableTool[..., Any]:
        bound: CompensableTool[..., Any] = CompensableTool(
            MethodType(self.fn, instance),
            name=self.name,
            description=self.description,
            reversibility=self.reversibility,
            by=_member_of(instance, self._by),
            options=self.options,
            json_arguments=self.json_arguments,
        )
        bound._probe = _member_of(instance, self._probe)
        return bound

    @property
    def origin(self) -> str:
        """The declared function, ``module.qualname``: which tool a typed call names, checked
        against the worker's tool of the same name."""
        return _where(self.fn)

    @property
    def method_of(self) -> type | None:
        """The class that declares this tool as a method, while it is not bound to an instance."""
        return self._owner if not inspect.ismethod(self.fn) else None

    def compensation(self, fn: C) -> C:
        """Decorator form of ``by=``: ``@reserve_inventory.compensation``; in a class body it
        decorates a method (``def cancel_flight(self, ctx)``)."""
        self._by = fn
        return fn

    def probe(self, fn: PR) -> PR:
        """Declare how to tell whether a call's effect exists: ``@create_order.probe``.

        The probe gets a :class:`ProbeContext` and returns True (or :class:`Found`) when the
        effect is there now, False when it is not; it must only read. ``sagacity reconcile``
        runs it to compare the journal with the world.
        """
        self._probe = fn
        return fn

    @property
    def declared_compensation(self) -> Compensation | MethodCompensation | str | None:
        return self._by

    @property
    def declared_probe(self) -> Probe | MethodProbe | None:
        return self._probe

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def _member_of(instance: object, declared: Any) -> Any:
    """``declared`` bound to ``instance`` when it is a function of the instance's class (found by
    name, so a subclass's override wins); anything else as it is."""
    if not inspect.isfunction(declared):
        return declared
    for klass in type(instance).__mro__:
        for attribute, value in vars(klass).items():
            if value is declared:
                return getattr(instance, attribute)
    return declared


def tools_of(instance: object) -> list[CompensableTool[..., Any]]:
    """The tools declared as methods of ``instance``'s class (and its bases), bound to it.

    Raises :class:`~sagacity.errors.ToolDeclarationError` when the class declares none, or when
    ``instance`` is a class (build the instance first, with what its tools need).
    """
    if isinstance(instance, type):
        raise ToolDeclarationError(
            f"tools_of({instance.__qualname__}) got the class: pass an instance, "
            f"tools_of({instance.__qualname__}(...)), built with what its tools need"
        )
    tools = [getattr(instance, a) for a in _tool_methods(type(instance))]
    if not tools:
        raise ToolDeclarationError(
            f"{type(instance).__qualname__} declares no tools: decorate its methods with "
            "@compensable"
        )
    return tools


def _tool_methods(cls: type) -> list[str]:
    """The attributes of ``cls`` (bases first, in declaration order) that declare tool methods."""
    names = dict.fromkeys(a for klass in reversed(cls.__mro__) for a in vars(klass))
    return [a for a in names if _declares(inspect.getattr_static(cls, a))]


def _declares(value: object) -> bool:
    return isinstance(value, CompensableTool) and value._owner is not None


def app_tools(module: ModuleType, opened: object = None) -> list[CompensableTool[..., Any]]:
    """The tools an app module serves, read once its ``lifespan`` is open.

    ``TOOLS`` is a list of tools (methods bound with :func:`tools_of` included), or a function
    of what the module's lifespan yielded (``opened``), for tools that are methods of an
    instance the lifespan builds around what it opened: ``TOOLS = tools_of`` with a lifespan
    that yields the instance.
    """
    declared = getattr(module, "TOOLS", [])
    if callable(declared) and not isinstance(declared, CompensableTool):
        if inspect.iscoroutinefunction(declared):
            raise ToolDeclarationError(
                f"{module.__name__}.TOOLS is an async function: make it a plain function of "
                "what the lifespan yielded (do the async work in the lifespan)"
            )
        declared = declared(opened)
    if isinstance(declared, CompensableTool) or not isinstance(declared, Iterable):
        raise ToolDeclarationError(
            f"{module.__name__}.TOOLS is {declared!r}: make it a list of tools, or a function "
            "returning one from what the module's lifespan yields"
        )
    return list(declared)


class MethodTool(CompensableTool[Concatenate[T, Q], R_co]):
    """A tool declared on a method, read from its class (``Bookings.book_flight``).

    Calling it calls the plain function, ``self`` first. Workflow code, which has no instance,
    names it in a typed call: ``saga.call(Bookings.book_flight, traveler=...)`` checks the
    arguments without ``self``, and the worker runs the instance its app registered.
    """

    if TYPE_CHECKING:
        # a typed call has no instance: the arguments after ``self`` (hence not the base's
        # signature, which a method tool, called as the plain function, keeps for __call__)
        @overload  # type: ignore[override]
        def typed_call(
            self: MethodTool[Any, P, Awaitable[R]],
            *args: P.args,
            **kwargs: P.kwargs,
        ) -> R: ...
        @overload
        def typed_call(self: MethodTool[Any, P, R], *args: P.args, **kwargs: P.kwargs) -> R: ...
        def typed_call(self, *args: Any, **kwargs: Any) -> Any: ...


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
    needs_approval: bool | ApprovalRule = False,
    approval_sla: timedelta | None = None,
    approval_policy: ApprovalPolicy | None = None,
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
    needs_approval: bool | ApprovalRule = False,
    approval_sla: timedelta | None = None,
    approval_policy: ApprovalPolicy | None = None,
) -> CompensableTool[P, R] | Callable[[Callable[P, R]], CompensableTool[P, R]]:
    """Declare a tool and its undo.

    ``by`` is the compensation: a function taking a :class:`CompensationContext`, or the name of
    such a function in the tool's module (of a method of its class, for a tool method). Reversibility defaults to REVERSIBLE. Mistakes are
    reported when a :class:`ToolRegistry` is built (at worker start), naming the tool and the fix.
    ``no_effect_on`` lists exception types after which the call is known to have done nothing;
    any other failure is compensated too, since its effect is unknown. ``needs_approval``: an
    :class:`~sagacity.rules.ApprovalRule` (or True: always) under which a call waits for a human.
    ``approval_sla``: how
    long an approval request of this tool may wait before the next tier is notified
    (``docs/signals.md``, escalation). ``approval_policy``: M approvals of a group for each.
    """
    if approval_sla is not None and approval_sla <= timedelta(0):
        raise ValueError(f"approval_sla must be positive, not {approval_sla}")
    defaults = ToolOptions()
    options = ToolOptions(
        idempotent=idempotent,
        timeout=timeout or defaults.timeout,
        heartbeat_timeout=heartbeat_timeout or defaults.heartbeat_timeout,
        no_effect_on=tuple(no_effect_on),
        approval=ALWAYS if needs_approval is True else needs_approval or None,
        approval_sla=approval_sla,
        approval_policy=approval_policy,
    )

    def wrap(f: Callable[P, R]) -> CompensableTool[P, R]:
        tool = CompensableTool(
            f,
            name=name,
            description=description,
            reversibility=reversibility or Reversibility.REVERSIBLE,
            by=by,
            options=options,
        )
        gated = tool.reversibility is Reversibility.IRREVERSIBLE
        why = refusal(tool.name, options.approval, gated) or policy_refusal(
            tool.name, approval_policy, gated or options.approval is not None
        )
        if why is not None:
            raise ToolDeclarationError(why)
        return tool

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
        """Validate JSON arguments against the tool's signature (or its own JSON schema); returns
        the keyword arguments to call it with."""
        if self.tool.json_arguments is not None:
            wrong = self.tool.json_arguments.problems(args)
            if wrong:
                raise ToolArgumentsInvalid(
                    f"arguments for tool {self.name!r} do not match its schema: {'; '.join(wrong)}"
                )
            return dict(args)
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
                raise ToolDeclarationError(_not_a_tool(tool))
            if tool.method_of is not None:
                owner = tool.method_of.__qualname__
                raise ToolDeclarationError(
                    f"tool {tool.name!r} is a method of {owner}, registered without an "
                    f"instance: register tools_of({owner}(...)) (or instance.{tool.fn.__name__}); "
                    "when the instance needs what the app's lifespan opens, let the lifespan "
                    "yield it and make TOOLS a function of it (TOOLS = tools_of)"
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


def _not_a_tool(value: object) -> str:
    if isinstance(value, type) and _tool_methods(value):
        return (
            f"{value.__qualname__} is a class: register the tools of an instance, "
            f"tools_of({value.__qualname__}(...))"
        )
    if not isinstance(value, type) and _tool_methods(type(value)):
        return f"{value!r} is not a tool but holds some: register tools_of(it)"
    return f"{value!r} is not a declared tool: decorate it with @compensable"


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
        _check_takes_context(tool.name, compensation, "compensation", CompensationContext)
    probe = cast(Probe | None, tool.declared_probe)  # bound with the tool, when a method
    if probe is not None:
        _check_takes_context(tool.name, probe, "probe", ProbeContext)
    arguments = _arguments_model(tool)
    schema = arguments.model_json_schema()
    if tool.json_arguments is not None:
        schema = tool.json_arguments.schema
    return RegisteredTool(tool, compensation, arguments, schema, probe)


def _resolve_compensation(tool: CompensableTool[..., Any]) -> Compensation | None:
    declared = tool.declared_compensation
    if declared is None or callable(declared):
        # a method of the tool's class was bound to the tool's instance with the tool
        return cast(Compensation | None, declared)
    instance = getattr(tool.fn, "__self__", None)
    if instance is not None:
        method = getattr(instance, declared, None)
        if not callable(method):
            owner = type(instance).__qualname__
            raise ToolDeclarationError(
                f"tool {tool.name!r} names compensation {declared!r}, but class {owner} has no "
                f"such method: define def {declared}(self, ctx: CompensationContext) there, "
                "or pass by=<function>"
            )
        bound: Compensation = method
        return bound
    module = sys.modules.get(tool.fn.__module__)
    found = getattr(module, declared, None)
    if not callable(found):
        raise ToolDeclarationError(
            f"tool {tool.name!r} names compensation {declared!r}, "
            f"but module {tool.fn.__module__} has no such function: define it there or pass by=<function>"
        )
    resolved: Compensation = found
    return resolved


def _check_takes_context(
    tool_name: str, fn: Callable[..., Any], role: str, context: type[_JournaledCall]
) -> None:
    """Refuse, at registration, a compensation or probe that could not take its context: the
    mistake would otherwise surface only when a saga compensates, after retries."""
    name = getattr(fn, "__name__", repr(fn))
    returns = "bool" if role == "probe" else "None"
    params = "self, ctx" if inspect.ismethod(fn) else "ctx"
    declare = f"declare it as def {name}({params}: {context.__name__}) -> {returns}"
    try:
        bound = inspect.signature(fn).bind(object())
    except (TypeError, ValueError):  # ValueError: a method without even self
        raise ToolDeclarationError(
            f"{role} {name!r} of tool {tool_name!r} cannot take the context: {declare}"
        ) from None
    (param,) = bound.arguments
    try:
        hint = inspect.signature(fn, eval_str=True).parameters[param].annotation
    except (NameError, TypeError, SyntaxError):  # an annotation only a type checker resolves
        return
    # typing.Any is a class from Python 3.11 on, and takes anything
    if isinstance(hint, type) and hint is not Any and not issubclass(context, hint):
        # say `def undo(order_id: str)`: it would get the context, not the tool's arguments
        raise ToolDeclarationError(
            f"{role} {name!r} of tool {tool_name!r} takes {param}: {hint.__name__}, but is "
            f"called with a {context.__name__} (the call's input and result are ctx.input and "
            f"ctx.result): {declare}"
        )


def _arguments_model(tool: CompensableTool[..., Any]) -> type[BaseModel]:
    if tool.json_arguments is not None:
        # checked against the tool's own schema in RegisteredTool.bind
        return create_model(f"{tool.name}_arguments", __config__=ConfigDict(extra="allow"))
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


def declared_result(tool: CompensableTool[..., Any]) -> Any:
    """The result type ``tool`` declares (its return annotation); ``Any`` when it declares none
    or one that cannot be resolved."""
    try:
        return _cached_return_hint(tool.fn)
    except TypeError:  # a callable object that cannot be hashed: resolved each time
        return _return_hint(tool.fn)


def _return_hint(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:  # a forward reference its module cannot resolve: the type is unknown
        return Any


# resolved once per function: every declarative saga's steps are checked when it opens, and
# resolving hints evaluates each annotation again (bounded: tools made at run time, by MCP say)
_cached_return_hint = functools.lru_cache(maxsize=4096)(_return_hint)
