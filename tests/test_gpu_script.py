"""benchmarks/gpu.py runs without a GPU (``--device cpu --quick``) and says so in its results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_gpu_script_runs_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling ``common``
    sys.modules.pop("gpu", None)
    import gpu

    gpu.main(["--device", "cpu", "--quick", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert [(r["backbone"], r["n_envs"]) for r in result["rows"]] == [
        (b, n) for b in gpu.BACKBONES for n in gpu.QUICK_SIZES]
    assert all(r["steps_per_s"] > 0 and r["rollout_s"] > 0 and r["update_s"] > 0 for r in result["rows"])
    text = (tmp_path / "gpu.md").read_text()
    if not result["gpu_available"]:
        assert "No GPU was available for this run" in text
    assert "| cpu | gtrxl | 4 | 64 |" in text and "steps/CPU-s" in text
