"""The target of a GTrXL a newcomer can read: one forward pass of the default ``gtrxl``, rollout step and training
segment as the policy calls them, enters at most three library files (``benchmarks/forward_trace.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GTRXL_FILES = {"policies/backbones/transformer_xl.py", "policies/attention/layer.py", "policies/window.py"}


def test_a_gtrxl_forward_pass_reads_in_three_files(tmp_path: Path):
    """Both passes enter exactly the backbone file, the attention file and the window operations, and the step
    reads its caches (mutation caught: the window transformer's ``segment_state`` left to the base class, whose
    hop adds ``policies/backbone.py``)."""
    subprocess.run([sys.executable, "benchmarks/forward_trace.py", "--out", str(tmp_path)], cwd=REPO, check=True,
                   capture_output=True)
    passes = json.loads((tmp_path / "forward_trace.json").read_text())["passes"]
    for name, entered in passes.items():
        assert set(entered["files"]) == GTRXL_FILES, name
    step = passes["rollout step"]["files"]["policies/backbones/transformer_xl.py"]
    assert "WindowTransformer._caches" in step and "WindowTransformer._segment" not in step
