"""A worker app mixing MCP and Python tools, with an agent: the ticket desk's tools (those of
``SAGACITY_MCP_POLICY``, opened by the ready-made app's lifespan), a Python tool, the agent saga
workflow and a scripted model that opens tickets until the desk refuses one."""

from __future__ import annotations

from typing import Any

from temporalio.plugin import SimplePlugin

from sagacity import CompensationContext, compensable
from sagacity.agents import (
    AgentSagaWorkflow,
    Call,
    Conversation,
    Say,
    Script,
    ScriptedModelProvider,
    openai_agents_plugins,
)
from sagacity.mcp.app import lifespan
from sagacity.settings import Settings

#: what the Python tool did and undid
NOTES: list[str] = []


def unpin(ctx: CompensationContext) -> None:
    NOTES.append(f"unpinned {ctx.input['ticket_id']}")


@compensable(by=unpin)
def pin_ticket(ticket_id: str) -> dict[str, Any]:
    """Pin a ticket on the team's board (a Python tool beside the MCP ones)."""
    NOTES.append(f"pinned {ticket_id}")
    return {"pinned": ticket_id}


def _opened(c: Conversation) -> str:
    """The id of the ticket just opened: the MCP result convention's structured content."""
    ticket_id: str = c.result_of("create_ticket")["structuredContent"]["id"]
    return ticket_id


def close_by_hand(ctx: CompensationContext) -> None:
    """A Python compensation of an MCP tool (``compensation: {function: ...}``)."""
    NOTES.append(f"closed {ctx.result['structuredContent']['id']} by hand, input {ctx.input}")


def _gave_up(c: Conversation) -> str:
    assert c.last is not None
    return f"I stopped: {c.last.tool} did not go through ({c.last.output})"


SCRIPTS = {
    "tickets": Script(
        turns=[
            [
                Call("create_ticket", {"title": "printer on fire"}),
                Call("pin_ticket", lambda c: {"ticket_id": _opened(c)}),
                Call("create_ticket", {"title": "fail"}),
                Say("Both tickets are open."),
            ],
            [Say("Sorry: I rolled the tickets back.")],
        ],
        on_failure=_gave_up,
    )
}

WORKFLOWS = [AgentSagaWorkflow]

__all__ = ["TOOLS", "WORKFLOWS", "lifespan", "plugins"]


def TOOLS(opened: list[Any]) -> list[Any]:
    """The desk's saga tools (what the lifespan opened) and the Python tool."""
    return [*opened, pin_ticket]


def plugins(settings: Settings) -> list[SimplePlugin]:
    return openai_agents_plugins(ScriptedModelProvider(SCRIPTS), model_attempts=2)
