"""One torch thread by default, and OpenMP's passive wait policy set before torch loads (docs/notes/threads.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from experiments.config import RunConfig
from experiments.threads import WAIT_POLICY, set_wait_policy

REPO = Path(__file__).resolve().parents[1]


def test_a_run_uses_one_thread_by_default():
    assert RunConfig().threads == 1


def test_wait_policy_is_passive_unless_the_user_chose_one():
    assert set_wait_policy({}) == WAIT_POLICY == "PASSIVE"
    assert set_wait_policy({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"


def test_train_rl_sets_the_wait_policy_before_torch_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import train_rl, os, torch; print(os.environ['OMP_WAIT_POLICY'])"  # torch: as a command imports it
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "PASSIVE"
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert imported.index("experiments.threads") < imported.index("torch")  # -X importtime lists finished imports


def test_training_in_this_process_leaves_the_callers_thread_count_as_it_was(tmp_path):
    """`train` and `lm train` run with their own thread count (`threads`; 0: every core) and give the caller
    back its own: a notebook, or a test after them, keeps what it set."""
    import torch

    import train_rl

    before = torch.get_num_threads()
    assert train_rl.main(["--env", "TMaze-v0", "--backbone", "mlp", "-n", "32", "--n-envs", "2", "--threads", "0",
                          "--eval-freq", "0", "--n-eval-episodes", "1", "--checkpoint-freq", "0", "-p",
                          "ppo.n_steps=16", "ppo.batch_size=32", "--log-dir", str(tmp_path)]) == 0
    assert torch.get_num_threads() == before
    assert train_rl.main(["lm", "train", "-p", f"log_dir={tmp_path / 'lm'}", "data=copy", "steps=2", "threads=0",
                          "segment_length=8", "batch_size=2", "copy_tokens=2000", "backbone_options.d_model=16",
                          "backbone_options.n_heads=2", "backbone_options.n_layers=1",
                          "backbone_options.memory_length=8", "eval_segments=1"]) == 0
    assert torch.get_num_threads() == before
