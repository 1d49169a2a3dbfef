"""OpenMP's wait policy for engram's processes: passive, unless the environment already sets one.

Imported first by ``train_rl.py``: OpenMP (GNU libgomp, which torch's CPU wheels use) reads ``OMP_WAIT_POLICY``
once, when torch loads it, so the policy must be in the environment before ``import torch``.

Why (docs/notes/threads.md): by default a libgomp thread that reaches the end of a parallel region spins for
a while before it sleeps. With two torch threads and another process on one of the two cores, the spinning
thread keeps its core busy, the thread that still has work waits behind the other process for its time slice,
and every parallel op in the update pays that wait: training ran 3.6–12× slower than with one thread (issue 30),
and a single op up to 8× slower (benchmarks/results/threads.md). Passive waiting lets the idle core take over.
One thread (the default of ``--threads``) has no parallel region and is not affected.
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"


def set_wait_policy(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Set ``OMP_WAIT_POLICY`` to :data:`WAIT_POLICY` unless it is set; return the policy in force."""
    return environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


set_wait_policy()
