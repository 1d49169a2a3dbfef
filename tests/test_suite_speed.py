"""The pure parts of ``benchmarks/suite_speed.py`` (nothing trained, nothing timed).

Mutations these catch: GTrXL/GRU as the ratio of the median speeds instead of one ratio per round; the
speed-up over RecurrentPPO inverted (engram's wall over RecurrentPPO's); the RecurrentPPO target called met
on speed alone when engram's return is lower; a round count of 0 accepted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
TASK = "popgym-RepeatPreviousEasy-v0"


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its siblings ``common`` and ``train_throughput``
    try:
        return importlib.import_module("suite_speed")
    finally:
        sys.path.remove(str(BENCHMARKS))


def result(suite: ModuleType, gtrxl: list[float], gru: list[float], engram_return: float) -> dict:
    """A result of one task: CPU speeds per round (GTrXL's wall speeds half of them), and a RecurrentPPO run of 100
    CPU seconds (100 wall) against an engram one of 10 (20 wall)."""
    settings = suite.Settings(rounds=len(gtrxl), speed_tasks=(TASK,), score_tasks=(TASK,), backbones=("gtrxl", "gru"))
    rounds = [{"round": i, "task": TASK, "backbone": backbone, "steps_per_cpu_second": speed,
               "steps_per_second": speed / 2 if backbone == "gtrxl" else speed,
               "collect_share": 0.5, "load_average": 2.0}
              for backbone, speeds in (("gtrxl", gtrxl), ("gru", gru)) for i, speed in enumerate(speeds)]
    score = {"steps": 1000, "std_return": 0.0, "load_average": 2.0}
    runs = [{"task": TASK, "learner": "engram gtrxl (defaults)", "cpu_s": 10.0, "wall_s": 20.0,
             "steps_per_cpu_second": 100.0, "mean_return": engram_return, **score},
            {"task": TASK, "learner": "RecurrentPPO MlpLstmPolicy (defaults)", "cpu_s": 100.0, "wall_s": 100.0,
             "steps_per_cpu_second": 10.0, "mean_return": 0.5, **score}]
    out = {"command": "x", "date": "d", "settings": asdict(settings), "rounds": rounds,
           "ratios": suite.ratios(rounds, settings), "recurrent_ppo": runs,
           "machine": {"cpu_model": "cpu", "cpu_count": 2, "torch": "t", "torch_threads": 1,
                       "load_average_at_start": [1.0, 1.0, 1.0]}}
    out["summary"] = suite.summary(out)
    return out


def test_gtrxl_over_gru_is_one_ratio_per_round(suite: ModuleType) -> None:
    # per round 0.5, 0.8, 0.1: median 0.5; the ratio of the median speeds would be 400 / 1000 = 0.4
    summary = result(suite, gtrxl=[400, 800, 100], gru=[800, 1000, 1000], engram_return=0.9)["summary"]
    assert summary["gtrxl_over_gru"][TASK] == {"median": 0.5, "range": [0.1, 0.8]}
    assert summary["median_steps_per_second"][f"{TASK} gtrxl"] == 400
    assert summary["gtrxl_over_gru_wall"][TASK]["median"] == 0.25  # wall rates are kept apart from CPU ones
    assert summary["median_steps_per_second_wall"][f"{TASK} gtrxl"] == 200


def test_recurrent_ppo_target_needs_speed_and_score(suite: ModuleType) -> None:
    ahead = result(suite, [1], [1], engram_return=0.9)
    assert ahead["summary"]["over_recurrent_ppo"][TASK] == {"speedup": 10.0, "speedup_wall": 5.0,
                                                             "return_difference": 0.4}
    assert "| 10.00× | 5.00× | +0.40 | met |" in suite.render(ahead)
    behind = result(suite, [1], [1], engram_return=0.2)  # ten times as fast, but learns less
    assert "| 10.00× | 5.00× | -0.30 | **not met** |" in suite.render(behind)


@pytest.mark.parametrize("text", ["0", "-3", "2.5", "many"])
def test_counts_must_be_positive_whole_numbers(suite: ModuleType, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="whole number >= 1"):
        suite.positive(text)
    assert suite.positive("16384") == 16384
