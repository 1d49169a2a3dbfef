"""Learners for memory policies: MemoryPPO (and the shared rollout machinery and buffer)."""

from agents.on_policy import NonFiniteError
from agents.ppo import MemoryPPO

ALGOS = {"ppo": MemoryPPO}

__all__ = ["ALGOS", "MemoryPPO", "NonFiniteError"]
