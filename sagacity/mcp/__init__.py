"""Any MCP server's tools as saga tools, and a gateway that gives any MCP client sagas,
approvals and the journal (``sagacity mcp``).

The policy file (:mod:`sagacity.mcp.policy`) names the upstream server and, for each of its
tools offered to sagas, its reversibility, idempotency and compensation;
:mod:`sagacity.mcp.upstream` holds the client session to that server, :mod:`sagacity.mcp.tools`
makes its tools saga tools, and :mod:`sagacity.mcp.app` serves them from a worker
(``sagacity worker --app sagacity.mcp.app``, or ``mcp_app`` in an app of your own). See
``docs/mcp.md``.
"""

from sagacity.mcp.policy import Policy, PolicyError, check_against, load_policy
from sagacity.mcp.tools import mcp_tools
from sagacity.mcp.upstream import Upstream

__all__ = ["Policy", "PolicyError", "Upstream", "check_against", "load_policy", "mcp_tools"]
