"""The base of history payloads: a model whose payloads leave out fields holding their default."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel


class Lean(BaseModel):
    """A model that travels in workflow history: its payloads leave out the fields that hold
    their default, which read back as that default.

    Most of a call's optional fields are unset on most calls; left in, they were a third of the
    bytes each tool call adds to history.
    """

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        # each optional field is left out, in pydantic's own serializer, when it equals its
        # default: the same payloads as a Python ``model_serializer`` that dropped them from
        # the dumped dict, at a seventh of the CPU (every tool call's request and outcome is
        # serialized here)
        optional = [(n, f) for n, f in cls.model_fields.items() if not f.is_required()]
        for _, info in optional:
            info.exclude_if = _equals(
                info.get_default(call_default_factory=True, validated_data={})
            )
        if optional:
            # a field naming a model defined later leaves the build to pydantic's own, once
            # that model exists (the exclusions are on the fields, so it keeps them)
            cls.model_rebuild(force=True, raise_errors=False)


def _equals(default: Any) -> Callable[[Any], bool]:
    """Whether a field's value equals ``default`` (compared as ``value == default``)."""
    return lambda value: bool(value == default)
