"""OpenMP's wait policy for engram's processes: passive, unless the environment already sets one.

Imported first by ``train_rl.py``: OpenMP (GNU libgomp, which torch's CPU wheels use) reads ``OMP_WAIT_POLICY``
once, when torch loads it, so the policy must be in the environment before ``import torch``.

Why (docs/notes/threads.md): by default a libgomp thread that waits, at the end of a parallel op or for the
next one, spins for a while before it sleeps. With two torch threads and other processes on the cores, the
spinning thread holds a core while its partner waits for a time slice, and every parallel op of the update pays
that wait: training ran 3.6–12× slower than with one thread with one core busy (issue 30), and one op 7–18×
slower on a saturated machine (benchmarks/results/thread_ops.md). With passive waiting the collapse is gone.
One thread (the default of ``--threads``) has no parallel region and is not affected.
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"


def set_wait_policy(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Set ``OMP_WAIT_POLICY`` to :data:`WAIT_POLICY` unless it is set; return the policy in force."""
    return environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


set_wait_policy()
