"""Save a tiny MemoryPPO checkpoint with the current code (run once, before a refactor), and the actions and
values it gives on fixed observations; ``tests/test_checkpoints.py`` loads it with later code.

    OMP_NUM_THREADS=1 .venv/bin/python tests/golden/make_checkpoint.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agents import MemoryPPO  # noqa: E402
from envs import make_vec_env  # noqa: E402

DATA = REPO / "tests" / "data"
CHECKPOINT = DATA / "gtrxl_ppo_saved.zip"
EXPECTED = DATA / "gtrxl_ppo_saved_outputs.pt"


def main() -> None:
    env = make_vec_env("TMaze-v0", n_envs=2, seed=0)
    model = MemoryPPO("MemoryPolicy", env, seed=0, n_steps=8, batch_size=16, n_epochs=1, segment_length=4,
                      policy_kwargs={"backbone": "gtrxl", "net_arch": [8],
                                     "backbone_kwargs": {"d_model": 8, "n_heads": 2, "n_layers": 1,
                                                         "memory_length": 4}})
    model.learn(16)
    model.save(CHECKPOINT)
    observations = torch.randn(5, 2, *env.observation_space.shape, generator=torch.Generator().manual_seed(0))
    policy = model.policy
    state = policy.initial_state(2)
    starts = torch.tensor([True, True])
    values, logits = [], []
    with torch.no_grad():
        for obs in observations:
            step = policy(obs, state, starts)
            state, starts = step.state, torch.tensor([False, False])
            values.append(step.values)
            logits.append(step.distribution.distribution.logits)
    torch.save({"observations": observations, "values": torch.stack(values), "logits": torch.stack(logits)},
               EXPECTED)
    print(CHECKPOINT.stat().st_size, EXPECTED.stat().st_size)


if __name__ == "__main__":
    np.random.seed(0)
    main()
