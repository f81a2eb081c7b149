"""A declarative saga's steps, and the worker's check of them before any runs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Step(BaseModel):
    """One step of a declarative saga. ``args`` values may be ``{"$ref": "step_id[.field…]"}``."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    @property
    def key(self) -> str:
        return self.id or self.tool


class StepsCheck(BaseModel):
    """A declarative saga's steps, for the worker to check before any of them runs."""

    steps: list[Step]


class StepsChecked(BaseModel):
    """What is wrong with the steps (empty: they can run), each naming the step and the fix."""

    problems: list[str] = Field(default_factory=list)
