"""Learners for memory policies: MemoryPPO and V-MPO on one rollout machinery and buffer."""

from agents.on_policy import PRECISIONS, NonFiniteError, saved_learner
from agents.ppo import MemoryPPO
from agents.vmpo import VMPO
from envs.rules import Registry

ALGOS = Registry("algo", {"ppo": MemoryPPO, "vmpo": VMPO})

__all__ = ["ALGOS", "PRECISIONS", "VMPO", "MemoryPPO", "NonFiniteError", "saved_learner"]
