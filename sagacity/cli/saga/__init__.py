"""``sagacity saga``: start a saga, see where it is, abort it, resolve a SUSPECT call, read its journal.

``graph`` draws the saga's path from its journal (Mermaid, DOT or SVG).

``start`` prints the saga id on stdout (so ``SAGA=$(sagacity saga start …)`` works) and its
progress on stderr. ``--wait`` returns when the saga has ended *or* stopped for a human (an
approval, a SUSPECT call), since nothing but that human can move it on. ``resolve`` is that
human's answer for a SUSPECT call: whether it took effect. ``abort --dry-run`` says what an abort
would compensate, in order, and what would stay live, and sends and writes nothing.

``start --workflow NAME --input JSON`` starts any workflow the app's worker registers, with that
JSON (or ``@file.json``) as its one argument; ``status`` and ``--wait`` print what it returned
whatever its type (a saga's or an agent saga's result, else the value as JSON).

Exit status: 0 done or waiting for a human, 1 the saga did not complete (compensated, aborted,
failed), refused a resolution, or its journal does not verify (chain or anchors), 2 bad usage or
input (one line on stderr, never a traceback) or unknown saga, 3 the saga cannot move on and the
message says why: no worker polls its task queue, its workflow task is failing (the failure's
message: an input that does not decode, a bug), or no worker registers its workflow type, 4 the
saga compensates and its running compensation has failed 3 attempts (and is retried): one line
on stderr names the tool, the attempt and the last error.
"""

from __future__ import annotations

import typer

from sagacity.cli.saga import abort, graph, journal, resolve, start, status

__all__ = ["app"]

app = typer.Typer(
    name="saga",
    help="Start sagas, follow them, abort them, read their journal.",
    no_args_is_help=True,
)

# One module per command; the order here is the order `sagacity saga --help` lists them in.
app.command("start")(start.start)
app.command("status")(status.status)
app.command("abort")(abort.abort)
app.command("resolve")(resolve.resolve)
app.command("journal")(journal.journal)
app.command("graph")(graph.graph)
