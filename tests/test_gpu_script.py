"""benchmarks/gpu.py runs without a GPU (``--device cpu --quick``) and says so in its results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

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


def test_a_failing_cell_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    """A cell that raises (a CUDA-graph capture that breaks, say) becomes a failed row; the cells after it run, and
    the results on disk are rewritten after every cell, so a run cut short keeps what it measured."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("gpu", None)
    import gpu

    build = gpu.build
    written = []

    def failing_gru(backbone, *args):
        if backbone == "gru":
            raise RuntimeError("capture broke | here")
        return build(backbone, *args)

    def record(name, result, render, out):
        written.append(len(result["rows"]))
        return write(name, result, render, out)

    write = gpu.write_results
    monkeypatch.setattr(gpu, "build", failing_gru)
    monkeypatch.setattr(gpu, "write_results", record)
    gpu.main(["--device", "cpu", "--quick", "--backbones", "gru", "mlp", "--sizes", "2", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "gpu.json").read_text())["rows"]
    assert rows[0] == {"backbone": "gru", "n_envs": 2, "device": "cpu", "graph": False,
                       "error": "RuntimeError: capture broke | here"}
    assert rows[1]["backbone"] == "mlp" and rows[1]["steps_per_s"] > 0
    assert written == [1, 2]
    text = (tmp_path / "gpu.md").read_text()
    assert "| cpu | gru | 2 | — | failed: RuntimeError: capture broke / here | | | | | |" in text


@pytest.mark.slow
def test_the_captured_rollout_step_acts_as_the_eager_one(monkeypatch):
    """``--graph``'s compiled step (run here by inductor on the CPU, without CUDA graphs) gives the eager step's
    actions, values and next memory from the same state, step after step and across an update."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("gpu", None)
    import gpu

    model = gpu.build("gtrxl", 3, 16, torch.device("cpu"))
    eager = model.policy.forward
    gpu.capture(model)
    model.learn(96)  # compiles, and moves the parameters: the caches of the first generation are stale
    env = model.env
    with torch.inference_mode():  # as in a rollout: the env's tensors were made there
        obs, state = env.reset(), model.policy.initial_state(env.num_envs)
        starts = torch.ones(env.num_envs, dtype=torch.bool)
        for _ in range(5):
            want, got = eager(obs, state, starts, deterministic=True), model.policy(obs, state, starts, True)
            torch.testing.assert_close(got.actions, want.actions)
            torch.testing.assert_close(got.values, want.values, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got.state.pi.memory, want.state.pi.memory, atol=1e-5, rtol=1e-5)
            obs, _, dones, _ = env.step(want.actions)
            state, starts = want.state, dones


def test_a_quick_run_prints_its_results_and_writes_none_unless_told_where(tmp_path, monkeypatch, capsys):
    """``--quick`` alone leaves the committed results as they are: it prints its table, and writes no file."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("gpu", None)
    import gpu

    # where gpu's helpers read RESULTS (`common`, or `benchmarks_common` behind notebooks' `common`)
    monkeypatch.setitem(gpu.results_target.__globals__, "RESULTS", tmp_path / "results")
    gpu.main(["--device", "cpu", "--quick", "--backbones", "mlp", "--sizes", "1"])
    assert "| cpu | mlp | 1 |" in capsys.readouterr().out
    assert not (tmp_path / "results").exists()
    gpu.main(["--device", "cpu", "--quick", "--backbones", "mlp", "--sizes", "1", "--name", "smoke"])
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["smoke.json", "smoke.md"]
