"""Approval policies: how many distinct people of which group must approve a tool's calls.

A policy is data, not code: it travels in the tool catalog a saga records (``ToolSpec``), so
workflow code counts co-approvals the same way on every replay, and the request row records it
so the verifier can check the decision offline (``docs/decisions.md``, co-approvals).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ApprovalPolicy", "policy_refusal"]


class ApprovalPolicy(BaseModel):
    """``required`` approvals by distinct principals of the keyring's ``group`` (M of N)::

        ApprovalPolicy(required=2, group="finance", starter_may_approve=False)

    A rejection by any one of them ends the request. ``starter_may_approve=False`` refuses the
    approval of whoever started the saga (``SagaOptions.started_by``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: int = Field(ge=1, le=20)
    #: a group of the keyring's ``groups`` (its principals); "" lets any principal approve
    group: str = Field(default="", max_length=200)
    starter_may_approve: bool = True

    def wire(self) -> dict[str, Any]:
        """The policy as JSON data, every field given (the request row records it so)."""
        return self.model_dump(mode="json")

    @property
    def label(self) -> str:
        """ "2 of finance", "2 approvers", as approvers read it."""
        who = f"of {self.group}" if self.group else "approvers" if self.required > 1 else "approver"
        return f"{self.required} {who}" + ("" if self.starter_may_approve else ", not the starter")


def read_policy(value: Any) -> ApprovalPolicy | None:
    """A request row's recorded ``policy`` as an :class:`ApprovalPolicy`; None if it is not one."""
    if not isinstance(value, dict):
        return None
    try:
        return ApprovalPolicy.model_validate(value)
    except ValidationError:
        return None


def policy_refusal(tool: str, policy: object, gated: bool) -> str | None:
    """Why ``tool`` may not be declared with ``policy`` as its ``approval_policy`` (``gated``:
    its calls wait for approval, being IRREVERSIBLE or under ``needs_approval``); None if it may."""
    if policy is None:
        return None
    if not isinstance(policy, ApprovalPolicy):
        return (
            f"tool {tool!r}: approval_policy takes an ApprovalPolicy(required=..., group=...), "
            f"not {type(policy).__name__}"
        )
    if not gated:
        # a policy on calls no one is asked about would read as if they were approved by M
        return (
            f"tool {tool!r}: approval_policy applies to calls that wait for approval, and "
            "none of this tool's do: declare needs_approval= or make it IRREVERSIBLE"
        )
    return None
