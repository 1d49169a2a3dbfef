"""OpenMP's wait policy for engram's processes: passive, unless the environment already sets one.

Imported first by `train_rl.py`: libgomp reads `OMP_WAIT_POLICY` once, when torch loads it. A spinning thread
holds a core that its partner in a parallel op waits for, which slows training on busy cores (docs/notes/threads.md).
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"


def set_wait_policy(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """Set `OMP_WAIT_POLICY` to `WAIT_POLICY` unless it is set; return the policy in force."""
    return environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


set_wait_policy()
