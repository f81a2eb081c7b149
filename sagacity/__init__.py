"""Sagacity: declarative compensation and a tamper-evident journal for AI-agent tool calls.

The root holds what tool authors need; workflow code and the clients that start and decide
sagas import :mod:`sagacity.workflow`.
"""

from sagacity.approval_policy import ApprovalPolicy
from sagacity.call_context import CallInfo, current_call
from sagacity.errors import NoEffect, PermanentCompensationError
from sagacity.rules import ApprovalRule
from sagacity.tools import (
    CompensableTool,
    CompensationContext,
    Found,
    ProbeContext,
    Reversibility,
    ToolRegistry,
    compensable,
    tools_of,
)

__all__ = [
    "ApprovalPolicy",
    "ApprovalRule",
    "CallInfo",
    "CompensableTool",
    "CompensationContext",
    "Found",
    "NoEffect",
    "PermanentCompensationError",
    "ProbeContext",
    "Reversibility",
    "ToolRegistry",
    "compensable",
    "current_call",
    "tools_of",
]
