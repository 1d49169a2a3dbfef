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
