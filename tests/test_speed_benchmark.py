"""The counting parts of ``benchmarks/speed.py`` (nothing trained): dispatched ops, the products it times for the
bound with their FLOPs, and the CPU attention kernel's FLOPs that ``FlopCounterMode`` misses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def speed(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling ``common``
    sys.modules.pop("speed", None)
    import speed

    return speed


def test_ops_and_products_are_counted_with_their_shapes(speed):
    a, b = torch.randn(8, 5), torch.randn(5, 3)
    with speed.OpCounter() as ops:
        (a @ b).relu().sum()
    assert ops.count == 3 and sum(ops.products.values()) == 1
    seconds, flops = speed._product_seconds(ops.products, 1e-4)
    assert flops == 2 * 8 * 5 * 3 and seconds > 0


def test_cpu_attention_flops_are_added(speed):
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    counter = speed.flop_counter()
    with counter:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 4 * 2 * 4 * 6 * 6 * 8
    counter = speed.flop_counter()
    with counter, torch.inference_mode():
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == 4 * 2 * 4 * 6 * 6 * 8


def test_the_throughput_table_gives_each_case_its_ratio_to_the_gru_of_its_task(speed):
    row = {"parameters": 10, "median_steps_per_cpu_s": 100.0, "median_rollout_cpu_share": 0.3}
    machine = {"cpu_model": "cpu", "cpu_count": 2, "torch": "2", "torch_threads": 1, "load_average_at_start": [0, 0, 0]}
    result = {"settings": {"threads": 1, "rounds": 2, "rollouts": 1}, "date": "2026-01-01", "machine": machine,
              "command": "speed.py",
              "throughput": {"gtrxl/T": {**row, "ratio_to_gru": {"median": 0.61, "range": [0.55, 0.67]}},
                             "gru/T": row}}
    lines = [line for line in speed._throughput_lines(result, "t") if line.startswith("| ")]
    assert "× GRU" in lines[0]
    assert lines[1].split(" | ")[4] == "0.61 (0.55–0.67)" and lines[2].split(" | ")[4] == "—"


def test_a_rollout_shape_case_builds_its_envs_and_steps(speed):
    model = speed.Case("mlp", "T-Maze-20", 8, None, 16).build()
    assert (model.n_envs, model.n_steps) == (8, 16)
    assert speed.Case("mlp", "T-Maze-20", 8, None, 16).name == "mlp/T-Maze-20 8 envs × 16 steps"


@pytest.mark.parametrize("argv", [["--rollout-shapes", "64x16"], ["--throughput-only", "--rollout-shapes", "64"],
                                  ["--throughput-only", "--rollout-shapes", "0x16"]])
def test_bad_rollout_shapes_are_refused_before_anything_runs(speed, argv):
    with pytest.raises(SystemExit) as refused:
        speed.main(argv)
    assert refused.value.code == 2


def test_a_predict_step_is_counted_with_its_state_carried(speed):
    model = speed.Case("mlp", "T-Maze-20", 2, None, 16).build()
    model.learn(32)
    step = speed._predict_call(model)
    first, _ = speed._counted(step)
    again, _ = speed._counted(step)
    assert first.count == again.count > 0


def test_a_quick_run_prints_its_results_and_writes_none_unless_told_where(speed, tmp_path, monkeypatch, capsys):
    """``--quick`` alone leaves the committed results as they are: it prints its tables, and writes no file."""
    monkeypatch.setitem(speed.results_target.__globals__, "RESULTS", tmp_path / "results")
    speed.main(["--quick", "--throughput-only", "--cases", "mlp/T-Maze-20"])
    assert "mlp/T-Maze-20" in capsys.readouterr().out
    assert not (tmp_path / "results").exists()
    speed.main(["--quick", "--throughput-only", "--cases", "mlp/T-Maze-20", "--out", str(tmp_path / "results")])
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["speed.json", "speed.md"]
