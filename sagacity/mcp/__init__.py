"""Any MCP server's tools as saga tools (``sagacity.mcp.tools``, ``sagacity.mcp.app``), and a
gateway that gives any MCP client sagas, approvals and the journal (``sagacity mcp``).

The policy file (:mod:`sagacity.mcp.policy`) names the upstream server and, for each of its
tools offered to sagas, its reversibility, idempotency and compensation.
"""

from sagacity.mcp.policy import Policy, PolicyError, check_against, load_policy

__all__ = ["Policy", "PolicyError", "check_against", "load_policy"]
