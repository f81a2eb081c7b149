"""The base of history payloads: a model whose payloads leave out fields holding their default."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer


class Lean(BaseModel):
    """A model that travels in workflow history: its payloads leave out the fields that hold
    their default, which read back as that default.

    Most of a call's optional fields are unset on most calls; left in, they were a third of the
    bytes each tool call adds to history.
    """

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, default in _defaults(type(self)):
            if getattr(self, name) == default:
                data.pop(name, None)
        return data


@cache
def _defaults(model: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """``model``'s optional fields and their defaults, made once per class: every payload of a
    tool call is serialized through :class:`Lean` (the defaults are compared, never handed out)."""
    return tuple(
        (name, field.get_default(call_default_factory=True, validated_data={}))
        for name, field in model.model_fields.items()
        if not field.is_required()
    )
