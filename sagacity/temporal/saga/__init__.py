"""The workflow-side saga engine: decides seqs, gates, and what to compensate; activities do the I/O.

:class:`Saga` (``saga.py``) is the face a workflow uses, composed of parts with one concern
each (``parts.py`` wires them): ``view`` (the journal read back), ``calls`` (the call path),
``suspect`` (calls with no outcome), ``gate`` (approvals), ``controls`` (abort, cancel),
``halts`` (operators' halts), ``undo`` (compensation), ``ending`` (seal and result) and
``carry`` (continue-as-new), over the state they share (``core``), their journal writes
(``journal``) and the signals' reading (``signals``). ``patches`` names every patch marker the
engine checks; ``tooltyping`` turns typed calls into journaled JSON and back.
"""

from sagacity.temporal.saga.saga import Saga

__all__ = ["Saga"]
