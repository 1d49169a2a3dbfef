"""A GTrXL a newcomer can follow: a rollout step reaches Transformer-XL's score in at most five library frames and
fifteen library functions, and both passes compute it in ``MultiHeadAttention.forward``
(``benchmarks/forward_trace.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_gtrxl_rollout_step_reaches_the_score_in_five_frames(tmp_path: Path):
    subprocess.run([sys.executable, "benchmarks/forward_trace.py", "--out", str(tmp_path)], cwd=REPO, check=True,
                   capture_output=True)
    passes = json.loads((tmp_path / "forward_trace.json").read_text())["passes"]
    step = passes["rollout step"]
    assert step["n_frames"] <= 5 and step["n_functions"] <= 15, (step["frames"], step["files"])
    for name, entered in passes.items():
        assert entered["frames"][-1] == "MultiHeadAttention.forward", name
    assert "policies/window.py" not in step["files"]
