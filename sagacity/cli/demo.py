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
    no_crash: Annotated[
        bool,
        typer.Option("--no-crash", help="Skip act two (a worker killed in the middle of a saga)."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (progress goes to stderr).")
    ] = False,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", help="What to ask the agent (default: the Order request)."),
    ] = None,
) -> None:
    """Run the Order agent as a saga: a step fails, the completed ones are undone, the journal
    verifies; then a worker is killed mid-saga and another finishes it."""
    from sagacity.cli._demo import main

    main(no_fault=no_fault, no_crash=no_crash, as_json=as_json, prompt=prompt)
