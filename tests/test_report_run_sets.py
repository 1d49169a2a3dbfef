"""A report counts every run below its directory once, and only as far as it got: runs of one seed from two studies,
runs behind folder links, runs a nested study lists but lacks, runs resumed to a larger budget, runs of another
`success_threshold` or with an unreadable summary, and runs evaluated at different steps (docs/studies.md)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from envs.rules import ConfigError
from experiments.studies.plotting import shared_steps
from experiments.studies.report import Study, build_report
from experiments.studies.runs import FINISHED, INTERRUPTED, Run, find_runs
from tests.test_report import fake_run

REPS = 50


def _edit_config(run: Path, **settings: object) -> None:
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, **settings}))


def test_runs_of_one_seed_from_two_studies_are_each_counted(tmp_path: Path) -> None:
    for study, scores in (("s1", (0.2, 0.4)), ("s2", (0.6, 0.8))):
        for seed, score in enumerate(scores):
            fake_run(tmp_path / study, "mlp", seed, score, curve=[score])
    text = build_report(tmp_path, tmp_path / "out", reps=REPS).read_text()
    assert "| mlp | 4/4 | 0.500 ± 0.224 (0: 0.200, 0: 0.600, 1: 0.400, 1: 0.800) |" in text


def test_a_run_resumed_to_a_larger_budget_is_unfinished_until_it_reaches_it(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "mlp", 0, 0.5, curve=[0.5])
    assert Run(run).state() == FINISHED
    _edit_config(run, total_timesteps=10_000)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "model_300_steps.zip").write_bytes(b"")
    assert Run(run).state() == INTERRUPTED


def test_runs_behind_folder_links_are_found_once_and_a_link_cycle_ends(tmp_path: Path) -> None:
    real = fake_run(tmp_path / "real", "mlp", 0, 0.5, curve=[0.5])
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(real, linked / real.name)
    os.symlink(tmp_path, linked / "cycle")
    assert [run.directory for run in find_runs(linked)] == [linked / real.name]
    assert len(find_runs(tmp_path)) == 1


def test_a_run_a_nested_study_lists_and_lacks_is_missing_from_the_parents_report(tmp_path: Path, capsys) -> None:
    study = tmp_path / "t3"
    names = [fake_run(study, "mlp", seed, 0.5, curve=[0.5]).name for seed in (0, 1)]
    (study / "study.yaml").write_text(yaml.safe_dump({"name": "t3", "runs": names}))
    for path in (study / names[1]).iterdir():
        path.unlink()
    (study / names[1]).rmdir()
    Study.analyse(tmp_path, reps=REPS)
    assert f"run {str(tmp_path / 't3' / names[1])!r}, which study.yaml lists, is missing" in capsys.readouterr().err


def test_runs_of_other_thresholds_are_kept_apart_and_the_header_names_each(tmp_path: Path) -> None:
    for seed, threshold in enumerate((0.9, 0.4)):
        _edit_config(fake_run(tmp_path, "lstm", seed, 0.45, curve=[0.45]), success_threshold=threshold)
    study = Study.analyse(tmp_path, reps=REPS)
    assert set(study.tasks[0].runs) == {"lstm success_threshold=0.9", "lstm success_threshold=0.4"}
    text = build_report(tmp_path, tmp_path / "out", reps=REPS).read_text()
    assert "solved (≥ its run's success_threshold: 0.4, 0.9)" in text


def test_tasks_not_pooled_say_why(tmp_path: Path) -> None:
    for env, seeds in (("TMaze-v0", (0, 1)), ("MemoryChain-v0", (0,))):
        for seed in seeds:
            fake_run(tmp_path, "gtrxl", seed, 0.5, env=env, curve=[0.5])
    text = build_report(tmp_path, tmp_path / "out", reps=REPS).read_text()
    assert "## All tasks" in text and "Not pooled: pooling needs each backbone scored on every task" in text


@pytest.mark.parametrize(("arguments", "message"), [
    ({"reps": 0}, "reps=0: expected an integer in [1, 50000]"),
    ({"reps": -3}, "reps=-3: expected an integer in [1, 50000]"),
    ({"threshold": "abc"}, "threshold='abc': expected a finite number"),
    ({"seed": -1}, "seed=-1: expected an integer in [0, 4294967295]"),
    ({"envs": "Cart*"}, "envs='Cart*': expected a list of env id patterns"),
])
def test_the_python_api_names_an_argument_it_cannot_take(arguments, message, tmp_path: Path) -> None:
    fake_run(tmp_path, "mlp", 0, 0.5, curve=[0.5])
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_report(tmp_path, tmp_path / "out", **arguments)
    assert not (tmp_path / "out").exists()


def test_a_summary_whose_success_rate_is_no_rate_is_named_unreadable(tmp_path: Path, capsys) -> None:
    fake_run(tmp_path, "mlp", 0, 0.5, curve=[0.5])
    run = fake_run(tmp_path, "mlp", 1, 0.5, curve=[0.5])
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "final_success_rate": float("nan")}))
    assert build_report(tmp_path, tmp_path / "out", reps=REPS).exists()
    assert "final_success_rate=nan, not a rate in [0, 1]" in capsys.readouterr().err


def test_the_mean_curve_of_runs_evaluated_at_different_steps_spans_what_all_cover() -> None:
    steps = shared_steps([np.array([100, 200, 300, 400]), np.array([150, 300, 450])])
    assert steps.tolist() == [150, 200, 300, 400]
    assert shared_steps([np.array([64, 128]), np.array([64, 128])]).tolist() == [64, 128]
