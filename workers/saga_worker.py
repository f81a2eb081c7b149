"""``python -m workers.saga_worker``: the worker of ``sagacity worker``, serving the Order example.

The worker itself is :mod:`sagacity.worker`; this module keeps the name deploy files and older
docs start it by.
"""

from sagacity.worker import DEFAULT_APP, main

__all__ = ["DEFAULT_APP", "main"]

if __name__ == "__main__":
    from sagacity.cli._exit import exit_now

    main()
    exit_now(0)  # past the Temporal SDK's interpreter-teardown crash (see sagacity/cli/_exit.py)
