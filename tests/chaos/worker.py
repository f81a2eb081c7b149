"""The chaos worker: ``python -m tests.chaos.worker`` serves the Order app and the chaos app.

The same worker as ``python -m workers.saga_worker``, with :mod:`tests.chaos.app`'s tool too.
"""

from __future__ import annotations

from sagacity.cli._exit import exit_now
from sagacity.worker import DEFAULT_APP, main

APPS = (DEFAULT_APP, "tests.chaos.app")

if __name__ == "__main__":
    main(APPS)
    exit_now(0)  # past the Temporal SDK's interpreter-teardown crash, as workers.saga_worker does
