"""``sagacity demo``: the Order agent as a saga, on the embedded stack (see ``_demo``).

The command is declared here and its work imported only when it runs, so every other
``sagacity`` command starts without loading the Agents SDK.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sagacity.cli._exit import hard_exit


@hard_exit
def demo(
    no_fault: Annotated[
        bool, typer.Option("--no-fault", help="No injected failure: the order goes through.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (progress goes to stderr).")
    ] = False,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", help="What to ask the agent (default: the Order request)."),
    ] = None,
) -> None:
    """Run the Order agent as a saga: a step fails, the completed ones are undone, the journal verifies."""
    from sagacity.cli._demo import main

    main(no_fault=no_fault, as_json=as_json, prompt=prompt)
