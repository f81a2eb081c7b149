"""Checking a declarative saga's steps against the worker's tools, before any of them runs.

A steps file's mistakes (a misspelt tool, a missing argument, a ``$ref`` to a field that is not
there or of the wrong type) would otherwise surface mid-saga, after earlier steps took effect.

What is checked: each step's tool exists; its literal arguments fit the tool's signature (or the
JSON schema of its own, for an Agents SDK ``FunctionTool``); each ``$ref`` names an earlier step
and, through declared result types (models, dataclasses, TypedDicts, ``dict[str, V]``), fields
that exist; and a ``$ref`` that is a whole argument has a JSON type that argument takes, judged
strictly in JSON terms (a string never feeds an integer, though pydantic would coerce ``"7"``;
only an integer also counts as a number).

What is not: what a tool leaves open (``Any``, an unannotated parameter or result,
``dict[str, Any]``), the type of a ``$ref`` nested inside a literal, and the values themselves
(a string of the right type may still fail a ``pattern``). Those are checked when the call runs,
before its INTENT. A fault in checking one step leaves that step to that check: it is logged,
and the other steps are still checked.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, Union

from pydantic import BaseModel, TypeAdapter, ValidationError
from temporalio.exceptions import ApplicationError

from sagacity.temporal.models import Step
from sagacity.tools import RegisteredTool, ToolRegistry, declared_result

#: the JSON types a value of each JSON type may be taken as, strictly: only an integer is also a
#: number (pydantic would also turn "42" into an int, or 1 into a bool; a steps file that relies
#: on that is refused, as its type is wrong)
_STRICTLY: dict[str, frozenset[str]] = {
    "string": frozenset({"string"}),
    "integer": frozenset({"integer", "number"}),
    "number": frozenset({"number"}),
    "boolean": frozenset({"boolean"}),
    "null": frozenset({"null"}),
    "object": frozenset({"object"}),
    "array": frozenset({"array"}),
}
_SCALARS: tuple[type, ...] = (str, int, float, bool, type(None), list, tuple, set, frozenset)
#: pydantic errors about the arguments themselves, never about a $ref's placeholder value
_SHAPE_ERRORS = frozenset({"missing", "extra_forbidden"})

Path = tuple[str | int, ...]

_log = logging.getLogger(__name__)


def check_steps(steps: Sequence[Step], tools: ToolRegistry) -> list[str]:
    """Every problem that would stop the steps mid-saga, each naming its step and the fix."""
    problems: list[str] = []
    keys = [s.key for s in steps]
    #: the result type each earlier step declares, by key (a repeated key: the latest step's,
    #: which is what a $ref to it gets)
    earlier: dict[str, Any] = {}
    for index, step in enumerate(steps):
        where = f"steps[{index}] ({step.key!r})"
        if step.id is not None and keys.count(step.key) > 1:
            others = ", ".join(f"steps[{i}]" for i, k in enumerate(keys) if k == step.key)
            problems.append(
                f"{where}: id {step.id!r} names more than one step ({others}): "
                "give each step its own id"
            )
        tool = tools.get(step.tool) if step.tool in tools else None
        if tool is None:
            problems.append(f"{where}: {_unknown_tool(step.tool, tools)}")
        try:
            problems += [
                f"{where}: {p}" for p in _step_problems(step, tool, earlier, keys[index + 1 :])
            ]
        except Exception:
            # a fault in checking one step (a tool's broken schema, a type this check trips on)
            # must not hold the saga: that step's arguments are checked when its call runs,
            # before its INTENT, where any such fault refuses the call once, never retried
            _log.exception("checking %s failed; its arguments are checked when it runs", where)
        earlier[step.key] = declared_result(tool.tool) if tool is not None else Any
    return problems


def _step_problems(
    step: Step, tool: RegisteredTool | None, earlier: dict[str, Any], later: list[str]
) -> list[str]:
    problems: list[str] = []
    refs = list(_refs(step.args))
    for path, ref in refs:
        problem = _check_ref(ref, path, tool, earlier, later)
        if problem is not None:
            problems.append(f"argument {_show(path)}: {problem}")
    if tool is not None:
        problems += _literal_problems(tool, step.args, refs)
    return problems


def _unknown_tool(name: str, tools: ToolRegistry) -> str:
    known = sorted(t.name for t in tools)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"no tool named {name!r} is registered: {hint}known tools: {', '.join(known) or 'none'}"


def _refs(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Each ``{"$ref": …}`` in ``value``, with where it sits."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            yield path, value["$ref"]
            return
        for key, item in value.items():
            yield from _refs(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _refs(item, (*path, i))


def _show(path: Path) -> str:
    return repr(".".join(str(p) for p in path) or "(arguments)")


def _check_ref(
    ref: Any,
    path: Path,
    tool: RegisteredTool | None,
    earlier: dict[str, Any],
    later: list[str],
) -> str | None:
    """Why ``ref`` cannot feed the argument at ``path``, or None when it can (or may)."""
    if not isinstance(ref, str) or not ref:
        return f"a $ref must be text, step[.field…]; got {ref!r}"
    name, *fields = ref.split(".")
    if name not in earlier:
        if name in later:
            return f"$ref {ref!r} names step {name!r}, which runs later: move it before this one"
        known = ", ".join(earlier) or "none"
        return f"$ref {ref!r} names no earlier step (earlier: {known})"
    declared = earlier[name]
    for depth, field in enumerate(fields):
        declared, missing = _field(declared, field)
        if missing is not None:
            at = ".".join([name, *fields[:depth]])
            return f"$ref {ref!r}: {at} is {missing}"
    if tool is None or len(path) != 1 or not isinstance(path[0], str):
        return None  # a $ref nested in a literal: its type is not checked
    target = tool.params_schema.get("properties", {}).get(path[0])
    if target is None:
        return None  # an unknown keyword, reported with the literal arguments
    wanted = _json_types(target, tool.params_schema.get("$defs", {}))
    given = _result_types(declared)
    if wanted is None or given is None or any(wanted & _STRICTLY[g] for g in given):
        return None
    return (
        f"$ref {ref!r} is {_kinds(given)}, but {tool.name!r} takes {_kinds(wanted)} there: "
        "reference a field of that type, or change the tool's annotation"
    )


def _field(declared: Any, field: str) -> tuple[Any, str | None]:
    """The declared type of ``field`` of a value of type ``declared`` (``Any``: not known), or
    what the value is that has no such field."""
    declared = _unwrapped(declared)
    if declared is Any:
        return Any, None
    origin = typing.get_origin(declared)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        args = typing.get_args(declared)
        return (args[1] if len(args) == 2 else Any), None  # any key may be there
    fields = _fields_of(declared)
    if fields is None:
        if isinstance(origin or declared, type) and issubclass(origin or declared, _SCALARS):
            return Any, f"{_name(declared)}, which has no fields"
        return Any, None  # a type this check cannot see into
    if field not in fields:
        known = ", ".join(fields) or "none"
        return Any, f"{_name(declared)}, which has no field {field!r} (fields: {known})"
    return fields[field], None


def _unwrapped(declared: Any) -> Any:
    """``declared`` without ``Annotated`` and ``Optional``; ``Any`` for other unions."""
    while True:
        origin = typing.get_origin(declared)
        if origin is Annotated:
            declared = typing.get_args(declared)[0]
        elif origin is Union or origin is types.UnionType:
            members = [a for a in typing.get_args(declared) if a is not type(None)]
            if len(members) != 1:
                return Any
            declared = members[0]
        else:
            return declared


def _fields_of(declared: Any) -> dict[str, Any] | None:
    """The fields of a model, dataclass or TypedDict, by name; None for any other type."""
    if not isinstance(declared, type):
        return None
    if issubclass(declared, BaseModel):
        return {name: f.annotation for name, f in declared.model_fields.items()}
    if dataclasses.is_dataclass(declared) or typing.is_typeddict(declared):
        try:
            return typing.get_type_hints(declared)
        except Exception:  # a forward reference its module cannot resolve
            return None
    return None


def _name(declared: Any) -> str:
    return getattr(declared, "__name__", None) or str(declared)


def _result_types(declared: Any) -> frozenset[str] | None:
    """The JSON types a result of type ``declared`` has once journaled; None: not known."""
    try:
        schema = TypeAdapter(declared).json_schema(mode="serialization")
    except Exception:  # a type pydantic cannot describe: not known
        return None
    return _json_types(schema, schema.get("$defs", {}))


def _json_types(schema: dict[str, Any], defs: dict[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema allows; None when it allows any."""
    if "$ref" in schema:
        return _json_types(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "type" in schema:
        kind = schema["type"]
        return frozenset([kind] if isinstance(kind, str) else kind) & frozenset(_STRICTLY) or None
    if "const" in schema:
        return frozenset({_json_type(schema["const"])})
    if "enum" in schema:
        return frozenset(_json_type(v) for v in schema["enum"])
    members = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if isinstance(members, list) and members:
        found = [_json_types(m, defs) for m in members]
        if any(f is None for f in found):
            return None
        return frozenset().union(*(f for f in found if f is not None))
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _kinds(kinds: frozenset[str]) -> str:
    return " or ".join(sorted(kinds))


def _literal_problems(
    tool: RegisteredTool, args: dict[str, Any], refs: list[tuple[Path, Any]]
) -> list[str]:
    """The step's arguments against the tool's signature; a $ref's value is not known yet, so
    only what it cannot change is reported there (a missing or unknown argument)."""
    own = tool.tool.json_arguments
    if own is not None:
        # a tool with a JSON schema of its own (an Agents SDK FunctionTool) says what is wrong
        # with whole arguments only: with a $ref among them, they are checked when the call runs
        return [] if refs else [f"{tool.name!r}: {p}" for p in own.problems(args)]
    try:
        tool.arguments.model_validate(args)
    except ValidationError as exc:
        errors = exc.errors()
    else:
        return []
    at_refs = [path for path, _ in refs]
    problems = []
    for error in errors:
        loc = tuple(error["loc"])
        kind = error["type"]
        if kind not in _SHAPE_ERRORS and any(_overlaps(loc, p) for p in at_refs):
            continue
        name = _show(loc)
        if kind == "missing":
            problems.append(f"{tool.name!r} needs argument {name}: add it")
        elif kind == "extra_forbidden":
            known = ", ".join(tool.params_schema.get("properties", {})) or "none"
            problems.append(
                f"{tool.name!r} takes no argument {name}: remove it, or use one of: {known}"
            )
        else:
            problems.append(
                f"argument {name}: {error['msg']} (got {repr(error.get('input'))[:80]}): "
                f"pass what {tool.name!r} declares"
            )
    return problems


def _overlaps(loc: tuple[Any, ...], path: Path) -> bool:
    """Whether an error at ``loc`` may be about the $ref placeholder at ``path``."""
    shorter = min(len(loc), len(path))
    return loc[:shorter] == path[:shorter]


def steps_refused(problems: Sequence[str]) -> ApplicationError:
    """The typed, non-retryable ``StepsInvalid`` that fails a saga whose steps cannot run,
    listing every problem."""
    count = len(problems)
    listed = "".join(f"\n- {p}" for p in problems)
    return ApplicationError(
        f"the steps cannot run ({count} problem{'s' if count > 1 else ''}); "
        f"no step ran and nothing was journaled:{listed}",
        list(problems),
        type="StepsInvalid",
        non_retryable=True,
    )
