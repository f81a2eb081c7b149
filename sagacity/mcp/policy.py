"""The MCP policy file: which upstream tools are saga tools, and how each one is undone.

A policy is YAML, written or reviewed by a human (observe mode writes a skeleton with
``reviewed: false``). :func:`load_policy` reads and checks it; every problem is a
:class:`~sagacity.errors.PolicyError` naming the file, the key and its line. Once the upstream's
tool list is known, :func:`check_against` checks the policy against it. The format is documented
in ``docs/mcp.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from mcp.types import Tool
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from sagacity.approval_policy import ApprovalPolicy, policy_refusal
from sagacity.errors import PolicyError
from sagacity.rules import ALWAYS, ApprovalRule, refusal
from sagacity.settings import seconds_or_iso
from sagacity.tools import Reversibility

__all__ = [
    "Compensation",
    "Policy",
    "PolicyError",
    "Seen",
    "ServerSpec",
    "SessionSpec",
    "ToolPolicy",
    "check_against",
    "load_policy",
    "parse_policy",
    "resolve_path",
    "result_data",
    "skeleton",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)
_M = TypeVar("_M", bound=BaseModel)
#: a server name goes into workflow ids and logs: plain characters only
_SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: NUL and other control characters: never part of a name, a command or an env value
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
#: the bounds of the policy's durations (seconds); docs/mcp.md states them
TIMEOUT_MAX_S = 3600.0
LEASE_MIN_S = 1.0
LEASE_MAX_S = 86400.0
#: the longest approval SLA a policy may give (a request past its deadline is long decided)
APPROVAL_SLA_MAX = timedelta(days=365)
#: a yes/no that is written true or false (never 'yes', never 1)
StrictBool = Annotated[bool, Field(strict=True)]
#: a plain text value with no control characters
_Text = Annotated[str, Field(strict=True, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$")]


def _duration(
    *, default: float, ge: float | None = None, gt: float | None = None, le: float
) -> Any:
    """A number of seconds, written as a number (never a string or a bool), finite, bounded."""
    return Field(default=default, strict=True, ge=ge, gt=gt, le=le, allow_inf_nan=False)


class ServerSpec(BaseModel):
    """The upstream MCP server: a stdio ``command`` or a streamable HTTP ``url``."""

    model_config = _STRICT

    name: str = Field(pattern=_SERVER_NAME)
    #: a stdio upstream: the command and its arguments, started by whoever connects
    command: list[_Text] | None = Field(default=None, min_length=1)
    #: a streamable HTTP upstream
    url: str | None = Field(default=None, pattern=r"^https?://")
    #: extra environment of a stdio upstream
    env: dict[_Text, _Text] = Field(default_factory=dict)
    #: working directory of a stdio upstream; relative to the policy file's folder, which is
    #: also the default
    cwd: str | None = None
    #: one upstream call's timeout, in seconds
    timeout_s: float = _duration(default=30, gt=0, le=TIMEOUT_MAX_S)

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give exactly one of command (a stdio upstream: [program, arg, ...]) and url "
                "(a streamable HTTP upstream: http://host:port/mcp)"
            )
        if self.url is not None and (self.env or self.cwd is not None):
            raise ValueError("env and cwd are for a stdio upstream (command), not a url")
        return self


class SessionSpec(BaseModel):
    """The gateway's session semantics."""

    model_config = _STRICT

    #: session: one saga per MCP session; explicit: a saga per commit/rollback
    boundary: Literal["session", "explicit"] = "session"
    #: what a saga still open when its session ends or is lost does
    on_end: Literal["compensate", "commit"] = "compensate"
    #: no word from the gateway for this long (seconds) = the session is lost
    lease_s: float = _duration(default=60, ge=LEASE_MIN_S, le=LEASE_MAX_S)
    commit_tool: _Text = Field(default="commit", min_length=1)
    rollback_tool: _Text = Field(default="rollback", min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> SessionSpec:
        if self.commit_tool == self.rollback_tool:
            raise ValueError(f"commit_tool and rollback_tool are both {self.commit_tool!r}")
        return self


class Compensation(BaseModel):
    """How a call is undone: another tool of the same server, or a Python function."""

    model_config = _STRICT

    #: the upstream tool to call (it need not be named in ``tools``: the worker calls it)
    tool: _Text | None = Field(default=None, min_length=1)
    #: its arguments, each ``input.<path>`` or ``result.<path>`` of the call it undoes
    arguments: dict[str, str] = Field(default_factory=dict)
    #: literal arguments
    constants: dict[str, Any] = Field(default_factory=dict)
    #: or a Python function ``package.module:name`` taking a CompensationContext
    function: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Compensation:
        if (self.tool is None) == (self.function is None):
            raise ValueError(
                "give exactly one of tool (an upstream tool called with mapped arguments) and "
                "function (package.module:name of a Python function)"
            )
        if self.function is not None:
            if self.arguments or self.constants:
                raise ValueError(
                    "arguments and constants go with a compensation tool, not function"
                )
            if not _FUNCTION.match(self.function):
                raise ValueError(
                    f"function {self.function!r} is not package.module:name (for example "
                    "myapp.undo:close_ticket)"
                )
        for name, path in self.arguments.items():
            if not re.match(r"^(input|result)\.[^.]+(\.[^.]+)*$", path):
                raise ValueError(
                    f"arguments.{name}: {path!r} must be input.<path> or result.<path> (a "
                    "value of the call's arguments or of its result, like result.id)"
                )
        both = self.arguments.keys() & self.constants.keys()
        if both:
            raise ValueError(f"{', '.join(sorted(both))} is both mapped and a constant")
        return self


class ToolPolicy(BaseModel):
    """What one upstream tool is as a saga tool."""

    model_config = _STRICT

    #: REVERSIBLE | COMPENSATABLE | IRREVERSIBLE, as ``@compensable``; not with read_only
    reversibility: Reversibility | None = None
    #: the tool has no effect: nothing to undo (each call is journaled all the same)
    read_only: StrictBool = False
    #: a repeat is harmless, so a call may be retried (default: read_only)
    idempotent: StrictBool | None = None
    compensation: Compensation | None = None
    #: an ``isError`` result may still have had an effect (default: it had none)
    error_may_have_effect: StrictBool = False
    #: ``true`` (every call) or a rule (``{field, op, value}``, ``any_of``, ``all_of``) under
    #: which a call waits for a human, as ``@compensable(needs_approval=...)``
    needs_approval: ApprovalRule | None = None
    #: a request undecided this long is escalated (ISO 8601 duration or seconds)
    approval_sla: timedelta | None = None
    #: how many approvers of which group each waiting call needs
    approval_policy: ApprovalPolicy | None = None

    @field_validator("needs_approval", mode="before")
    @classmethod
    def _rule(cls, value: Any) -> ApprovalRule | None:
        """``true``/``false`` or a rule, as ``sagacity.rules`` reads it, no key left unknown."""
        if value is True:
            return ALWAYS
        if value is False or value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError(
                "give true (every call waits for a human) or a rule: {field: amount, op: '>', "
                "value: 1000}, {any_of: [...]}, {all_of: [...]}"
            )
        _known_rule_keys(value)
        return _strictly(ApprovalRule, value)

    @field_validator("approval_sla", mode="before")
    @classmethod
    def _sla_given(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("give an ISO 8601 duration (PT4H) or seconds, not true or false")
        return seconds_or_iso(value)

    @field_validator("approval_sla")
    @classmethod
    def _sla_bounded(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and not timedelta(0) < value <= APPROVAL_SLA_MAX:
            raise ValueError(f"must be above 0 and at most {APPROVAL_SLA_MAX.days} days")
        return value

    @field_validator("approval_policy", mode="before")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        # strict: required: "2" or starter_may_approve: no is a mistake, as elsewhere in a policy
        return value if value is None else _strictly(ApprovalPolicy, value)

    @model_validator(mode="after")
    def _undo_fits(self) -> ToolPolicy:
        if self.read_only:
            if self.reversibility is not None or self.compensation is not None:
                raise ValueError(
                    "a read_only tool has nothing to undo: drop reversibility and compensation"
                )
            if self.needs_approval or self.approval_sla or self.approval_policy:
                raise ValueError(
                    "a read_only tool has no effect for a human to approve: drop "
                    "needs_approval, approval_sla and approval_policy (or give it a "
                    "reversibility)"
                )
            return self
        if self.reversibility is None:
            raise ValueError(
                "say reversibility: REVERSIBLE, COMPENSATABLE or IRREVERSIBLE (or read_only: "
                "true for a tool with no effect)"
            )
        if self.reversibility is Reversibility.IRREVERSIBLE and self.compensation is not None:
            raise ValueError(
                "an IRREVERSIBLE tool takes no compensation (an imperfect undo makes it "
                "COMPENSATABLE)"
            )
        if self.reversibility is not Reversibility.IRREVERSIBLE and self.compensation is None:
            raise ValueError(
                f"a {self.reversibility.value} tool needs a compensation (tool: ... with "
                "arguments, or function: package.module:name), or reversibility: IRREVERSIBLE"
            )
        return self

    @property
    def is_idempotent(self) -> bool:
        return self.read_only if self.idempotent is None else self.idempotent

    def approval_refusals(self, name: str) -> list[tuple[str, str]]:
        """What ``@compensable`` would refuse of this tool's approval keys (key, why): a
        conditional rule on an IRREVERSIBLE tool, a rule that cannot be judged; an SLA or a
        policy on a tool whose calls never wait."""
        irreversible = self.reversibility is Reversibility.IRREVERSIBLE
        gated = irreversible or self.needs_approval is not None
        found = [
            ("needs_approval", refusal(name, self.needs_approval, irreversible)),
            ("approval_policy", policy_refusal(name, self.approval_policy, gated)),
        ]
        if self.approval_sla is not None and not gated:
            found.append(
                (
                    "approval_sla",
                    f"tool {name!r}: approval_sla applies to calls that wait for approval, "
                    "and none of this tool's do: give it needs_approval or make it IRREVERSIBLE",
                )
            )
        return [(key, why) for key, why in found if why is not None]


def _strictly(model: type[_M], value: Any) -> _M:
    """``value`` as ``model``, strictly (a policy writes 2, not "2"); one line per problem."""
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors()
            )
        ) from None


def _known_rule_keys(rule: dict[Any, Any]) -> None:
    """A rule's keys are ApprovalRule's (it keeps unknown ones quietly: a policy refuses them)."""
    unknown = sorted(map(str, rule.keys() - ApprovalRule.model_fields.keys()))
    if unknown:
        raise ValueError(
            f"unknown rule key {', '.join(unknown)} (a rule takes name, field, op, value, "
            "any_of, all_of or always)"
        )
    for nested in (*(rule.get("any_of") or ()), *(rule.get("all_of") or ())):
        if isinstance(nested, dict):
            _known_rule_keys(nested)


class Policy(BaseModel):
    """A whole policy file."""

    model_config = _STRICT

    version: Literal[1]
    #: observe mode writes false; a policy must be reviewed before it is used
    reviewed: StrictBool
    server: ServerSpec
    session: SessionSpec = Field(default_factory=SessionSpec)
    #: the saga tools; an upstream tool not named here is refused
    tools: dict[_Text, ToolPolicy] = Field(min_length=1)
    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _names(self) -> Policy:
        for name in (self.session.commit_tool, self.session.rollback_tool):
            if name in self.tools:
                raise ValueError(
                    f"the gateway's tool {name!r} clashes with a tool named in tools: rename it "
                    "with session.commit_tool / session.rollback_tool"
                )
        return self

    @property
    def source(self) -> Path | None:
        """The file the policy was read from."""
        return self._source

    @property
    def folder(self) -> Path:
        """The policy file's folder (the current directory for a policy given as text)."""
        return self._source.parent if self._source is not None else Path.cwd()

    def where(self) -> str:
        return str(self._source) if self._source is not None else "the policy"


def load_policy(path: str | Path) -> Policy:
    """The reviewed policy in the YAML file ``path``; :class:`PolicyError` for any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read the MCP policy {path}: {exc}") from None
    return parse_policy(text, source=path)


def parse_policy(text: str, *, source: Path | None = None) -> Policy:
    """The reviewed policy in ``text`` (YAML); ``source`` names it in errors."""
    where = str(source) if source is not None else "the policy"
    if "\x00" in text:
        raise PolicyError(f"{where}: the file holds NUL bytes; a policy is YAML text")
    try:
        _refuse_anchors(where, text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(f"{where}{line}: not valid YAML: {problem}") from None
    except RecursionError:
        raise PolicyError(f"{where}: nested too deeply to be a policy") from None
    if not isinstance(data, dict):
        raise PolicyError(
            f"{where}: a policy is a mapping with version, reviewed, server and tools; "
            f"got {type(data).__name__}"
        )
    if node is not None:
        _refuse_duplicate_keys(where, node)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_problems(where, node, exc)) from None
    refused = [
        f"tools.{name}.{key} (line {_line_of(node, ['tools', name, key])}): {why}"
        for name, spec in policy.tools.items()
        for key, why in spec.approval_refusals(name)
    ]
    if refused:
        raise PolicyError(f"{where}: " + "\n  ".join(refused))
    if not policy.reviewed:
        raise PolicyError(
            f"{where}: reviewed is false: this is an unreviewed skeleton (observe mode writes "
            "one); check each tool's reversibility and compensation, then set reviewed: true"
        )
    policy._source = source
    return policy


def _refuse_anchors(where: str, text: str) -> None:
    """A policy needs no anchors, aliases or merge keys, and aliases nested in aliases expand
    exponentially (the "billion laughs"): refuse them before anything expands them."""
    try:
        events = list(yaml.parse(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return  # composing the text reports it, with its line
    for event in events:
        line = f" (line {event.start_mark.line + 1})"
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise PolicyError(
                f"{where}{line}: YAML anchors and aliases (&name, *name) are not allowed in a "
                "policy; write each value out"
            )
        if isinstance(event, yaml.ScalarEvent) and event.value == "<<" and event.implicit[0]:
            raise PolicyError(
                f"{where}{line}: YAML merge keys (<<) are not allowed in a policy; write each "
                "key out"
            )


def _refuse_duplicate_keys(where: str, node: yaml.Node) -> None:
    """YAML keeps the last of two equal keys silently; a policy refuses them."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[Any] = set()
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise PolicyError(
                            f"{where} (line {key.start_mark.line + 1}): key {key.value!r} "
                            "appears twice in the same mapping"
                        )
                    seen.add(key.value)
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def _problems(where: str, node: yaml.Node | None, exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        loc = [part for part in error["loc"] if not str(part).startswith("function-")]
        # a model validator's message stands for the whole object, not a field
        key = ".".join(str(part) for part in loc) or "(top level)"
        line = _line_of(node, loc)
        at = f" (line {line})" if line else ""
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (a misspelling?); see docs/mcp.md for the policy's keys"
        elif error["type"] == "missing":
            message = "missing"
        lines.append(f"{key}{at}: {message}")
    return f"{where}: " + ("; ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines))


def _line_of(node: yaml.Node | None, loc: Iterable[Any]) -> int | None:
    """The 1-based line of the YAML node at ``loc``, or of the nearest node above it."""
    if node is None:
        return None
    found = node
    for part in loc:
        nxt: yaml.Node | None = None
        if isinstance(found, yaml.MappingNode):
            for key, value in found.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    # a key that is the problem itself (unknown, say) is better shown at the key
                    nxt = value if not isinstance(value, yaml.ScalarNode) else key
                    break
        elif (
            isinstance(found, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(found.value)
        ):
            nxt = found.value[part]
        if nxt is None:
            break
        found = nxt
    line: int = found.start_mark.line + 1
    return line


def resolve_path(path: str, *, input: Mapping[str, Any], result: Any) -> Any:
    """The value ``input.<p>`` or ``result.<p>`` names; ``LookupError`` saying where it stopped.

    ``result`` is a call's journaled result (``{"content": [...], "structuredContent": ...}``):
    a ``result.`` path resolves in ``structuredContent`` when present, else in the JSON of the
    first text content block.
    """
    root, _, rest = path.partition(".")
    value: Any = input if root == "input" else result_data(result)
    walked = root
    for part in rest.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise LookupError(f"{path}: {walked} has no {part!r} (it is {_shape(value)})")
        walked = f"{walked}.{part}"
    return value


def result_data(result: Any) -> Any:
    """What ``result.<path>`` walks in a journaled result: its ``structuredContent``, else the
    JSON of its first text block (the text itself when that is not JSON)."""
    if not isinstance(result, Mapping):
        return result
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and block.get("type") == "text":
            try:
                return json.loads(block.get("text", ""))
            except ValueError:
                return block.get("text")
    return None


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        keys = ", ".join(sorted(map(str, value))[:8])
        return f"an object with keys {keys}" if keys else "an empty object"
    if value is None:
        return "nothing"
    return f"a {type(value).__name__}"


def check_against(policy: Policy, tools: Iterable[Tool]) -> None:
    """:class:`PolicyError` unless the upstream's ``tools`` hold every tool the policy names
    (and every compensation tool), with the arguments its mappings give and need."""
    upstream = {tool.name: tool for tool in tools}
    offered = ", ".join(sorted(upstream)) or "none"
    problems: list[str] = []
    for name, spec in policy.tools.items():
        if name not in upstream:
            problems.append(f"tools.{name}: the upstream has no tool {name!r} (it has: {offered})")
            continue
        undo = spec.compensation
        if undo is None or undo.tool is None:
            continue
        at = f"tools.{name}.compensation"
        target = upstream.get(undo.tool)
        if target is None:
            problems.append(
                f"{at}.tool: the upstream has no tool {undo.tool!r} (it has: {offered})"
            )
            continue
        params = _properties(target)
        given = {*undo.arguments, *undo.constants}
        if params is not None:
            for argument in sorted(given - params.keys()):
                problems.append(
                    f"{at}: {undo.tool!r} takes no argument {argument!r} (it takes: "
                    f"{', '.join(sorted(params)) or 'none'})"
                )
        for argument in sorted(set(target.input_schema.get("required", [])) - given):
            problems.append(f"{at}: {undo.tool!r} requires {argument!r}, which is not mapped")
        own = _properties(upstream[name])
        for argument, path in undo.arguments.items():
            first = path.split(".")[1]
            if path.startswith("input.") and own is not None and first not in own:
                problems.append(
                    f"{at}.arguments.{argument}: {name!r} takes no argument {first!r}, so "
                    f"{path} names nothing"
                )
    if problems:
        raise PolicyError(
            f"{policy.where()} does not fit the upstream {policy.server.name!r}:\n  "
            + "\n  ".join(problems)
        )


def _properties(tool: Tool) -> dict[str, Any] | None:
    """A tool's declared arguments, or None when its schema leaves them open."""
    properties = tool.input_schema.get("properties")
    if not isinstance(properties, dict):
        return None
    if tool.input_schema.get("additionalProperties", False) not in (False, None):
        return None
    return properties


@dataclass
class Seen:
    """What observe mode saw of one tool: how often it was called, with which argument keys,
    and the keys of its results."""

    calls: int = 0
    argument_keys: set[str] = field(default_factory=set)
    result_keys: set[str] = field(default_factory=set)


#: an effect's usual undo, by verb: create_x -> close_x / delete_x ...
_UNDO_VERBS = {
    "create": ("delete", "close", "cancel", "remove"),
    "add": ("remove", "delete"),
    "open": ("close",),
    "reserve": ("release", "cancel"),
    "book": ("cancel",),
    "start": ("stop", "cancel"),
    "insert": ("delete",),
}


def skeleton(server: ServerSpec, seen: Mapping[str, Seen], upstream: Iterable[Tool] = ()) -> str:
    """A policy to review (``reviewed: false``): each seen tool IRREVERSIBLE, with commented
    guesses at its undo among the ``upstream`` tools. Loads as a policy once reviewed."""
    offered = {tool.name: tool for tool in upstream}
    server_yaml = yaml.safe_dump(
        {"server": server.model_dump(exclude_defaults=True, exclude_none=True)},
        sort_keys=False,
        default_flow_style=None,
    )
    out = [
        "# A policy skeleton written by `sagacity mcp --observe`. Review every tool:",
        "# its reversibility, idempotency and compensation; then set reviewed: true.",
        "# A REVERSIBLE or COMPENSATABLE tool may still need a human for some calls:",
        '#   needs_approval: {field: amount, op: ">", value: 1000}   (or true: every call)',
        "#   approval_sla: PT4H   (undecided this long: the next tier is told)",
        "#   approval_policy: {required: 2, group: finance, starter_may_approve: false}",
        "version: 1",
        "reviewed: false",
        server_yaml.rstrip(),
        "tools:",
    ]
    for name in sorted(seen):
        what = seen[name]
        out.append(
            f"  # called {what.calls} time(s); arguments: {_keys(what.argument_keys)}; "
            f"result keys: {_keys(what.result_keys)}"
        )
        out.append(f"  {_scalar(name)}:")
        out.append("    reversibility: IRREVERSIBLE   # each call waits for a human's approval")
        guesses = _undo_guesses(name, offered)
        for guess in guesses:
            required = offered[guess].input_schema.get("required") or ["id"]
            out.append(f"    # reversibility: REVERSIBLE   # if {guess} undoes it:")
            out.append(
                f"    # compensation: {{tool: {guess}, arguments: {{{required[0]}: result.id}}}}"
            )
        if guesses:
            # an undoable tool's calls run unasked; a rule can still send some to a human
            field_ = _scalar(min(what.argument_keys, default="amount"))
            out.append(
                f'    # needs_approval: {{field: {field_}, op: ">", value: 1000}}   # then the '
                "calls it matches wait for a human (true: every call)"
            )
    unseen = sorted(n for n in offered if n not in seen)
    if unseen:
        out.append("  # not called while observing: " + ", ".join(unseen))
    if not seen:
        out.append("  {}  # no calls seen: name the tools to offer here")
    return "\n".join(out) + "\n"


def _keys(keys: set[str]) -> str:
    return ", ".join(sorted(keys)) or "none"


def _scalar(name: str) -> str:
    return json.dumps(name) if not re.match(r"^[A-Za-z_][\w-]*$", name) else name


def _undo_guesses(name: str, upstream: Mapping[str, Tool]) -> list[str]:
    verb, _, rest = name.partition("_")
    return [
        f"{undo}_{rest}"
        for undo in _UNDO_VERBS.get(verb, ())
        if rest and f"{undo}_{rest}" in upstream
    ]
