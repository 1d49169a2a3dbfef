"""The study report's statistics on synthetic run directories with known values, checked against
direct numpy computations (and rliable's own functions), and the report's files."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from rliable import metrics

import train_rl
from envs.rules import ConfigError
from experiments.run_dir import EVAL_COLUMNS
from experiments.studies import stats
from experiments.studies.report import Study, build_report
from tests.test_cli import REPO

REPS = 300


def fake_run(root: Path, backbone: str, seed: int, score: float | None, *, state: str = "finished",
             env: str = "TMaze-v0", env_kwargs: dict | None = None, success: bool = True,
             curve: list[float] | None = None, every: int = 100, stochastic: list[float] | None = None,
             returns: list[float] | None = None) -> Path:
    """A run directory as experiments.training writes it (and a study's status.json): ``score`` is the final
    evaluation; ``curve`` the evaluations logged during training; ``stochastic`` the stochastic policy's
    success rates beside them, the final one last (none: a run from before those columns); ``returns`` the
    mean returns beside the success rates of ``curve``, the final one last (default: the same values);
    ``state`` finished, diverged, failed or interrupted (a checkpoint, no summary)."""
    env_kwargs = {"length": 10} if env_kwargs is None else env_kwargs
    directory = root / f"{env}__ppo-{backbone}__{seed}"
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(
        {"algo": "ppo", "backbone": backbone, "env": env, "env_kwargs": env_kwargs, "seed": seed,
         "success_threshold": 0.9, "total_timesteps": every * len(curve or [0])}))
    curve = curve if curve is not None else []
    with (directory / "evaluations.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, EVAL_COLUMNS)
        writer.writeheader()
        for i, value in enumerate(curve, 1):
            writer.writerow({"timesteps": i * every, "mean_return": returns[i - 1] if returns else value,
                             "std_return": 0.0, "mean_length": 11,
                             "success_rate": value if success else "", "wall_seconds": i,
                             "stochastic_success_rate": stochastic[i - 1] if stochastic else ""})
    if state == "finished":
        summary = {"env_steps": every * max(len(curve), 1), "final_mean_return": returns[-1] if returns else score,
                   "final_std_return": 0.0,
                   "final_success_rate": score if success else None, "wall_seconds": 10.0, "steps_per_second": 100.0}
        if stochastic:
            summary["final_stochastic_success_rate"] = stochastic[-1]
        (directory / "summary.json").write_text(json.dumps(summary))
    elif state in ("diverged", "failed"):
        (directory / "status.json").write_text(json.dumps({"state": state, "error": f"{state} at update 3"}))
    elif state == "interrupted":
        (directory / "checkpoints").mkdir()
        (directory / "checkpoints" / f"model_{every}_steps.zip").write_bytes(b"")
    return directory


A = [0.10, 0.95, 0.90, 0.50, 1.00, 0.30, 0.92, 0.70]
B = [0.20, 0.40, 0.90, 0.60, 0.05, 0.35, 0.80, 0.91]


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """Backbone a: 8 finished seeds, one diverged (last evaluation 0.95), one failed before any
    evaluation; backbone b: 8 finished seeds and one interrupted."""
    for seed, score in enumerate(A):
        fake_run(tmp_path, "a", seed, score, curve=[0.0, score / 2, score])
    fake_run(tmp_path, "a", 8, None, state="diverged", curve=[0.1, 0.95])
    fake_run(tmp_path, "a", 9, None, state="failed")
    for seed, score in enumerate(B):
        fake_run(tmp_path, "b", seed, score, curve=[0.0, score, score])
    fake_run(tmp_path, "b", 8, None, state="interrupted", curve=[0.2])
    return tmp_path


def test_statistics_match_direct_numpy(study):
    analysis = Study.analyse(study, reps=REPS)
    (task,) = analysis.tasks
    assert task.success and task.label == "TMaze-v0 (length=10)"
    a = np.array(A + [0.95])  # the diverged run scores its last evaluation; the failed one has none
    b = np.array(B)
    assert np.array_equal(np.sort(task.stats.scores["a"].ravel()), np.sort(a))
    assert np.array_equal(np.sort(task.stats.scores["b"].ravel()), np.sort(b))

    sorted_a = np.sort(a)  # 9 scores: IQM drops the 2 lowest and 2 highest; P25, P75 fall on sorted[2], sorted[6]
    estimates = task.stats.estimates["a"]
    assert estimates["iqm"].value == pytest.approx(sorted_a[2:7].mean())
    assert estimates["mean"].value == pytest.approx(a.sum() / a.size)
    assert estimates["median"].value == pytest.approx(sorted_a[4])
    sorted_b = np.sort(b)  # 8 scores: IQM is the mean of the middle 4
    assert task.stats.estimates["b"]["iqm"].value == pytest.approx(sorted_b[2:6].mean())
    assert task.stats.estimates["b"]["median"].value == pytest.approx((sorted_b[3] + sorted_b[4]) / 2)

    rel_a, rel_b = task.reliability["a"], task.reliability["b"]
    assert rel_a.iqr == pytest.approx(sorted_a[6] - sorted_a[2])
    assert rel_a.cvar == pytest.approx((sorted_a[0] + sorted_a[1] + 0.25 * sorted_a[2]) / 2.25)  # worst 9/4 runs
    assert rel_a.worst == pytest.approx(sorted_a[0])
    assert (rel_a.runs, rel_a.finished, rel_a.diverged, rel_a.failed) == (10, 8, 1, 1)
    assert rel_a.solved == sum(s >= 0.9 for s in A) == 4 and rel_a.with_result == 10  # diverged: never solved
    assert (rel_b.runs, rel_b.finished, rel_b.diverged, rel_b.failed, rel_b.with_result) == (9, 8, 0, 0, 8)
    assert rel_b.solved == 2
    low, high = np.interp([0.25, 0.75], np.linspace(0, 1, b.size), sorted_b)
    assert rel_b.iqr == pytest.approx(high - low)
    assert rel_b.cvar == pytest.approx(sorted_b[:2].mean())  # the worst 2 of 8

    wins = sum((x > y) + 0.5 * (x == y) for x in a for y in b) / (a.size * b.size)
    assert task.stats.improvement["a", "b"].value == pytest.approx(wins)
    assert task.stats.improvement["b", "a"].value == pytest.approx(1 - wins)
    for estimate in [*estimates.values(), task.stats.improvement["a", "b"]]:
        assert estimate.low <= estimate.value <= estimate.high


def test_solve_threshold_is_configurable(study):
    (task,) = Study.analyse(study, reps=REPS, threshold=0.5).tasks
    assert task.reliability["a"].solved == sum(s >= 0.5 for s in A)
    assert task.reliability["b"].solved == sum(s >= 0.5 for s in B)


def test_cvar_is_the_mean_of_the_worst_quarter_even_with_ties():
    assert stats.cvar(np.array([1.0, 0.5, 1.0, 1.0, 1.0])) == pytest.approx((0.5 + 0.25 * 1.0) / 1.25)
    assert stats.cvar(np.array([3.0, 1.0, 2.0, 4.0])) == pytest.approx(1.0)
    assert stats.cvar(np.array([0.7, 0.2])) == pytest.approx(0.2)  # fewer than 4 runs: the worst one


def test_numpy_statistics_agree_with_rliable():
    rng = np.random.default_rng(1)
    for n in range(1, 13):
        x = rng.integers(0, 4, size=(n, 3)) / 3
        y = rng.integers(0, 4, size=(n + 3, 3)) / 3
        assert stats.iqm(x) == pytest.approx(metrics.aggregate_iqm(x))
        assert stats.probability_of_improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))


def test_bootstrap_intervals_bracket_the_truth(tmp_path):
    """40 seeds of a return-scored task from N(0.3, 0.1²): mean, median and IQM are all 0.3; b is
    a shifted by 0.2, so P(b > a) = Φ(0.2 / (0.1·√2)) ≈ 0.921."""
    rng = np.random.default_rng(0)
    n, mu, sigma = 40, 0.3, 0.1
    a = rng.normal(mu, sigma, n)
    b = rng.normal(mu + 0.2, sigma, n)
    for seed in range(n):
        fake_run(tmp_path, "a", seed, float(a[seed]), success=False, curve=[float(a[seed])])
        fake_run(tmp_path, "b", seed, float(b[seed]), success=False, curve=[float(b[seed])])
    (task,) = Study.analyse(tmp_path, reps=1000).tasks
    assert not task.success
    standard_error = sigma / math.sqrt(n)
    for name in ("mean", "median", "iqm"):
        estimate = task.stats.estimates["a"][name]
        assert estimate.low < mu < estimate.high, name
        assert estimate.high - estimate.low < 6 * standard_error, name
    mean = task.stats.estimates["a"]["mean"]
    assert 0.7 < (mean.high - mean.low) / (2 * 1.96 * standard_error) < 1.3  # a 95 % interval, not 50 % or 99.9 %
    improvement = task.stats.improvement["b", "a"]
    truth = 0.5 * (1 + math.erf(0.2 / (sigma * math.sqrt(2)) / math.sqrt(2)))
    assert improvement.low < truth < improvement.high and improvement.value > 0.8


def test_curve_band_brackets_the_true_mean_curve():
    rng = np.random.default_rng(3)
    truth = np.linspace(0.0, 1.0, 12)
    curves = truth + rng.normal(0, 0.2, size=(30, truth.size))
    mean, low, high = stats.curve_band(curves, reps=1000)
    assert np.allclose(mean, curves.mean(axis=0))
    assert np.mean((low < truth) & (truth < high)) >= 0.8
    assert np.all(high - low < 5 * 0.2 / np.sqrt(30))  # a 95 % band is 3.92 standard errors wide


def test_report_files_list_every_run_once(study, tmp_path):
    fake_run(study / "other", "a", 0, -0.5, env="MemoryChain-v0", env_kwargs={}, success=False, curve=[-1.0, -0.5])
    path = build_report(study, reps=REPS)
    text = path.read_text()
    assert "## TMaze-v0 (length=10)" in text and "## MemoryChain-v0" in text
    assert "final **success rate**" in text and "final **mean return**" in text
    runs_table = text.split("## Runs")[1]
    for run in [*study.glob("TMaze-v0__*"), *study.glob("other/*")]:
        name = run.relative_to(study).as_posix()
        assert runs_table.count(f"| {name} |") == 1, name
    assert "| TMaze-v0__ppo-a__8 | diverged |" in runs_table and "diverged at update 3" in runs_table
    assert "| TMaze-v0__ppo-b__8 | unfinished |" in runs_table
    assert "## All tasks" not in text  # a return-scored task is not pooled with success rates
    for figure in ("curves_TMaze_v0_length_10", "scores_TMaze_v0_length_10", "improvement_TMaze_v0_length_10",
                   "curves_MemoryChain_v0", "scores_MemoryChain_v0"):
        png = study / f"{figure}.png"
        assert png.stat().st_size > 1000, png
        assert f"({png.name})" in text


def test_tasks_scored_by_success_are_pooled(tmp_path):
    for seed in range(3):
        for env in ("TMaze-v0", "MemoryChain-v0"):
            fake_run(tmp_path, "a", seed, 0.5 + 0.1 * seed, env=env, curve=[0.5])
            fake_run(tmp_path, "b", seed, 0.1 * seed, env=env, curve=[0.1])
    analysis = Study.analyse(tmp_path, reps=REPS)
    assert analysis.overall is not None and analysis.overall.scores["a"].shape == (3, 2)
    assert analysis.overall.improvement["a", "b"].value == pytest.approx(1.0)
    assert "## All tasks" in build_report(tmp_path, reps=REPS).read_text()
    assert (tmp_path / "scores_all.png").exists()

    for seed in range(3):  # a return-scored task is not on the [0, 1] scale of success rates
        for backbone in ("a", "b"):
            fake_run(tmp_path / "returns", backbone, seed, 2.0 * seed, env="MemoryChain-v0", success=False)
            fake_run(tmp_path / "returns", backbone, seed, 0.5, curve=[0.5])
    assert Study.analyse(tmp_path / "returns", reps=REPS).overall is None


def test_report_command(study, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert train_rl.main(["report", str(study), "--reps", "100", "--out", str(out)]) == 0
    assert (out / "report.md").exists() and str(out / "report.md") in capsys.readouterr().out
    assert train_rl.main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("")
    assert train_rl.main(["report", str(tmp_path / "a_file")]) == 2
    assert capsys.readouterr().err == (f"error: DIR={str(tmp_path / 'a_file')!r}: expected a study directory; "
                                       "this is a file\n")


@pytest.mark.parametrize("arguments", [{"study_dir": "missing"}, {"study_dir": "empty"},
                                       {"study_dir": "empty", "envs": ["TMaze-*"]}])
def test_build_report_names_a_study_dir_it_cannot_read(tmp_path, arguments):
    """A `ValueError` (engram's rule for bad input) that is also the `FileNotFoundError` of a missing path."""
    (tmp_path / "empty").mkdir()
    arguments = {**arguments, "study_dir": tmp_path / arguments["study_dir"]}
    with pytest.raises(ValueError, match="^(study_dir|out_dir)=") as refused:
        build_report(**arguments)
    assert isinstance(refused.value, FileNotFoundError) == ("envs" not in arguments)


def test_a_report_of_some_tasks_keeps_their_runs_only_and_never_replaces_the_study_report(tmp_path, capsys):
    """``report --env PATTERN``: the runs of the matching envs only, written where --out says; refused without
    --out (the study's own report.md stays as it was) and when no env matches (naming the envs there)."""
    for seed in range(3):
        for env in ("TMaze-v0", "MemoryChain-v0"):
            fake_run(tmp_path, "a", seed, 0.5 + 0.1 * seed, env=env, curve=[0.5])
    study_report = build_report(tmp_path, reps=REPS)
    before = study_report.read_text()
    out = tmp_path / "chain_only"
    assert train_rl.main(["report", str(tmp_path), "--env", "Memory*", "--reps", "100", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "MemoryChain-v0__ppo-a__2" in text and "TMaze-v0__ppo-a__0" not in text and "3 runs" in text
    with pytest.raises(SystemExit) as refused:
        train_rl.main(["report", str(tmp_path), "--env", "Memory*"])
    assert refused.value.code == 2
    assert "--env Memory*: a report of some of the tasks needs --out DIR" in capsys.readouterr().err
    assert study_report.read_text() == before
    assert train_rl.main(["report", str(tmp_path), "--env", "popgym-*", "--out", str(out)]) == 2
    assert "its envs: MemoryChain-v0, TMaze-v0" in capsys.readouterr().err


def test_lowest_after_solving_is_the_deepest_fall_after_the_first_solved_evaluation(tmp_path: Path):
    """A collapse after solving shows in the reliability table (the worst run of the group)."""
    fake_run(tmp_path, "gtrxl", 0, 1.0, curve=[0.3, 0.95, 0.56, 1.0, 1.0])  # solved, fell to 0.56, recovered
    fake_run(tmp_path, "gtrxl", 1, 1.0, curve=[0.2, 0.1, 0.9, 0.85, 1.0])  # the 0.1 before solving does not count
    fake_run(tmp_path, "mlp", 0, 0.5, curve=[0.5, 0.5, 0.5])  # never solved
    fake_run(tmp_path, "lstm", 0, 0.4, curve=[0.5, 0.95])  # the final evaluation counts too
    study = Study.analyse(tmp_path, reps=20)
    lows = {run.name: run.lowest_after_solving(True, 0.9) for run in study.runs}
    assert lows == {"TMaze-v0__ppo-gtrxl__0": 0.56, "TMaze-v0__ppo-gtrxl__1": 0.85, "TMaze-v0__ppo-mlp__0": None,
                    "TMaze-v0__ppo-lstm__0": 0.4}
    reliability = study.tasks[0].reliability
    assert reliability["gtrxl"].lowest_after_solving == 0.56
    assert reliability["mlp"].lowest_after_solving is None


def test_a_run_that_solved_and_ended_below_the_threshold_is_solved_then_lost(tmp_path: Path):
    """"Solved, then lost" is its own outcome beside solved, diverged and failed: the final evaluation below the
    threshold after one at or above it; the Runs table gives each run's outcome and its best score beside its final."""
    fake_run(tmp_path, "gtrxl", 0, 0.5, curve=[0.3, 0.95, 0.7])  # solved, then lost
    fake_run(tmp_path, "gtrxl", 1, 0.95, curve=[0.3, 0.95, 0.5])  # lost, then solved again: solved
    fake_run(tmp_path, "gtrxl", 2, 0.5, curve=[0.3, 0.89, 0.5])  # never at the threshold: not solved
    fake_run(tmp_path, "gtrxl", 3, 0.9, curve=[0.3, 0.5])  # solved at the final evaluation
    fake_run(tmp_path, "gtrxl", 4, None, state="diverged", curve=[0.95, 0.2])  # diverged, whatever came before
    study = Study.analyse(tmp_path, reps=20)
    reliability = study.tasks[0].reliability["gtrxl"]
    assert (reliability.solved, reliability.solved_then_lost, reliability.diverged, reliability.failed) == (2, 1, 1, 0)
    report = build_report(tmp_path, tmp_path / "report", reps=20).read_text()
    reliability_table = report.split("### Reliability")[1].split("## Runs")[0]
    assert "| solved (≥ 0.9) | solved, then lost | diverged | failed |" in reliability_table
    assert "| gtrxl | 5 | 4 | 2/5 (40%) | 1 | 1 | 0 |" in reliability_table
    runs_table = report.split("## Runs")[1]
    assert "| TMaze-v0__ppo-gtrxl__0 | finished | 300 | 0 | 0.500 | 0.950 | solved, then lost |" in runs_table
    assert "| TMaze-v0__ppo-gtrxl__1 | finished | 300 | 0 | 0.950 | 0.950 | solved |" in runs_table
    assert "| TMaze-v0__ppo-gtrxl__2 | finished | 300 | 0 | 0.500 | 0.890 | not solved |" in runs_table
    assert "| TMaze-v0__ppo-gtrxl__4 | diverged | 0 | 0 | 0.200 | 0.950 | – |" in runs_table
    assert "the final model's (model.zip), not the best evaluation's (best_model.zip)" in report


def test_the_stochastic_policy_has_its_own_lowest_after_solving(tmp_path: Path):
    """The deterministic policy's dip (an argmax loop) and the sampling policy's evaluations are
    reported apart; runs that predate the stochastic columns have none."""
    fake_run(tmp_path, "gtrxl", 0, 1.0, curve=[0.5, 1.0, 0.47, 1.0], stochastic=[0.6, 0.95, 0.93, 1.0, 0.99])
    fake_run(tmp_path, "gtrxl", 1, 1.0, curve=[0.5, 1.0, 1.0, 1.0], stochastic=[0.4, 0.7, 0.92, 0.97, 0.81])
    fake_run(tmp_path, "lstm", 0, 1.0, curve=[0.5, 1.0, 0.6, 1.0])
    study = Study.analyse(tmp_path, reps=20)
    lows = {run.name: run.lowest_after_solving(True, 0.9, stochastic=True) for run in study.runs}
    assert lows == {"TMaze-v0__ppo-gtrxl__0": 0.93, "TMaze-v0__ppo-gtrxl__1": 0.81, "TMaze-v0__ppo-lstm__0": None}
    reliability = study.tasks[0].reliability
    assert (reliability["gtrxl"].lowest_after_solving, reliability["gtrxl"].lowest_after_solving_stochastic) == (
        0.47, 0.81)
    assert (reliability["lstm"].lowest_after_solving, reliability["lstm"].lowest_after_solving_stochastic) == (
        0.6, None)


def test_the_learning_table_counts_the_cost_of_a_curriculum(tmp_path: Path):
    """A run started from another run's weights (``init_from``) gets that run's steps and seconds
    in the warm-start column; a run without one gets a dash; a run stopped before its budget shows
    where, and its last evaluation."""
    source = fake_run(tmp_path / "short", "gtrxl", 1, 1.0, curve=[0.5, 1.0], every=3000)
    warm = fake_run(tmp_path / "long", "gtrxl", 1, 1.0, curve=[0.2, 0.95], env_kwargs={"length": 50})
    config = yaml.safe_load((warm / "config.yaml").read_text())
    (warm / "config.yaml").write_text(yaml.safe_dump({**config, "init_from": str(source)}))
    stopped = fake_run(tmp_path / "long", "gtrxl", 2, None, state="interrupted", curve=[0.2, 0.5],
                       env_kwargs={"length": 50})
    (stopped / "progress.json").write_text(json.dumps({"timesteps": 200, "wall_seconds": 2.0}))
    command = [sys.executable, "benchmarks/learning_table.py", "--name", "curriculum", "--out", str(tmp_path),
               str(tmp_path / "short"), str(tmp_path / "long")]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    rows = {row["task"]: row for row in json.loads((tmp_path / "curriculum.json").read_text())["rows"]}
    assert rows["TMaze-v0 (length=50)"]["median_warm_start_steps"] == 6000
    assert rows["TMaze-v0 (length=50)"]["median_warm_start_seconds"] == 10.0
    assert rows["TMaze-v0 (length=10)"]["median_warm_start_steps"] is None
    table = (tmp_path / "curriculum.md").read_text()
    assert "| 6,000, 10 |" in table and "| — |" in table
    assert "2: stopped at 200 (last 0.50)" in table


def test_the_learning_table_leaves_out_tasks_without_a_success_rate(tmp_path: Path):
    """A study mixing tasks scored by success and by return (the POPGym suite) gives a table of the former and
    names the latter (before: a TypeError on the first return-scored run)."""
    fake_run(tmp_path / "suite", "gtrxl", 0, 1.0, curve=[0.5, 1.0])
    fake_run(tmp_path / "suite", "gtrxl", 0, 0.7, env="popgym-RepeatFirstEasy-v0", env_kwargs={}, success=False,
             curve=[0.2, 0.7])
    command = [sys.executable, "benchmarks/learning_table.py", "--name", "mixed", "--out", str(tmp_path),
               str(tmp_path / "suite")]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    result = json.loads((tmp_path / "mixed.json").read_text())
    assert [row["task"] for row in result["rows"]] == ["TMaze-v0 (length=10)"]
    assert result["return_scored"] == ["popgym-RepeatFirstEasy-v0"]
    assert "the runs of popgym-RepeatFirstEasy-v0" in (tmp_path / "mixed.md").read_text()


def test_runs_of_one_backbone_with_different_settings_are_reported_as_variants(tmp_path: Path) -> None:
    """Two studies of the same backbone and tasks with different model sizes, read from their parent directory:
    one row per variant, labelled by the settings that differ (the same label on every task), not one pooled row."""
    for study_name, d_model in (("today", 64), ("previous", 128)):
        for env, scores in (("TMaze-v0", [1.0, 0.5]), ("MemoryChain-v0", [0.2, 0.3])):
            for seed, score in enumerate(scores):
                run = fake_run(tmp_path / study_name, "gtrxl", seed, score if d_model == 64 else score / 2,
                               env=env, curve=[score])
                config = yaml.safe_load((run / "config.yaml").read_text())
                config["gtrxl"] = {"d_model": d_model, "n_heads": 4}
                (run / "config.yaml").write_text(yaml.safe_dump(config))
    fake_run(tmp_path / "today", "lstm", 0, 0.9, curve=[0.9])
    tasks = {task.label: task for task in Study.analyse(tmp_path, reps=REPS).tasks}
    assert set(tasks["TMaze-v0 (length=10)"].runs) == {"gtrxl d_model=64", "gtrxl d_model=128", "lstm"}
    assert set(tasks["MemoryChain-v0 (length=10)"].runs) == {"gtrxl d_model=64", "gtrxl d_model=128"}
    assert [s.seed for s in tasks["TMaze-v0 (length=10)"].finished["gtrxl d_model=128"]] == [0, 1]


def test_runs_whose_configuration_predates_a_section_are_not_a_variant(tmp_path: Path) -> None:
    """A study resumed across versions: seed 0's config.yaml has no `gru` section (written before runs recorded
    their backbone's options), seeds 1 and 2 record `hidden_size: 128`. They are one backbone, not two rows
    `gru hidden_size=null` and `gru hidden_size=128`; settings that every run records still tell variants apart."""
    for seed in range(3):
        run = fake_run(tmp_path / "study", "gru", seed, 0.5, curve=[0.5])
        if seed:
            config = yaml.safe_load((run / "config.yaml").read_text())
            config["gru"] = {"hidden_size": 128, "n_layers": 1}
            (run / "config.yaml").write_text(yaml.safe_dump(config))
    (task,) = Study.analyse(tmp_path, reps=REPS).tasks
    assert set(task.runs) == {"gru"} and [s.seed for s in task.finished["gru"]] == [0, 1, 2]


def test_a_study_of_one_setting_per_backbone_is_labelled_by_backbone_alone(study: Path) -> None:
    assert set(Study.analyse(study, reps=REPS).tasks[0].runs) == {"a", "b"}


def test_a_rebuilt_report_removes_the_figures_of_tasks_that_are_gone_and_keeps_everything_else(tmp_path):
    """Runs of a task removed between two reports into one directory: its figures go, the remaining tasks' are
    rewritten, and a file the report did not write stays (no mixed report, nothing of the user's lost)."""
    for env in ("TMaze-v0", "MemoryChain-v0"):
        for seed in range(2):
            fake_run(tmp_path / "runs", "gtrxl", seed, 0.5, env=env, curve=[0.5])
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.png").write_bytes(b"mine")
    build_report(tmp_path / "runs", out, reps=REPS)
    first = {p.name for p in out.iterdir()}
    assert {"curves_MemoryChain_v0_length_10.png", "curves_TMaze_v0_length_10.png", "notes.png"} <= first
    for run in (tmp_path / "runs").glob("MemoryChain-v0*"):
        for file in sorted(run.rglob("*"), reverse=True):
            file.rmdir() if file.is_dir() else file.unlink()
        run.rmdir()
    build_report(tmp_path / "runs", out, reps=REPS)
    second = {p.name for p in out.iterdir()}
    assert not {name for name in second if "MemoryChain" in name} and "curves_TMaze_v0_length_10.png" in second
    assert "notes.png" in second and second < first


def test_a_report_into_a_folder_whose_report_md_is_the_users_is_refused_and_keeps_both(tmp_path):
    """A `report.md` of the user's in `--out` that shows their own image: the report writes neither over it nor
    removes the image (mutation caught: the user's report.md replaced, or every image it linked removed)."""
    fake_run(tmp_path / "runs", "gtrxl", 0, 0.5, curve=[0.5])
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("# My notes\n![holiday](photo.png)\n")
    (out / "photo.png").write_bytes(b"mine")
    with pytest.raises(ConfigError, match="holds a report.md that train_rl.py report did not write"):
        build_report(tmp_path / "runs", out, reps=REPS)
    assert (out / "report.md").read_text() == "# My notes\n![holiday](photo.png)\n"
    assert (out / "photo.png").read_bytes() == b"mine"


def test_a_report_that_fails_midway_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    """A figure whose write fails (a full disk) after others were drawn: the error names that figure, and every
    file of the earlier report (report.md, figures, a task's figures that the new one would drop) is as it was,
    with no temporary file left (mutation caught: the figures written one by one, or stale ones removed first)."""
    from matplotlib.figure import Figure

    from envs.atomic import WriteError

    for env in ("TMaze-v0", "MemoryChain-v0", "RepeatFirst-v0"):
        for seed in range(2):
            fake_run(tmp_path / "runs", "gtrxl", seed, 0.5, env=env, curve=[0.5])
    out = tmp_path / "report"
    build_report(tmp_path / "runs", out, reps=REPS)
    for run in (tmp_path / "runs").glob("MemoryChain-v0*"):
        for file in sorted(run.rglob("*"), reverse=True):
            file.rmdir() if file.is_dir() else file.unlink()
        run.rmdir()
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    drawn = []
    savefig = Figure.savefig

    def full_disk_on_the_second(self, file, *args, **kwargs):
        drawn.append(Path(file))
        if len(drawn) == 2:
            raise OSError(28, "No space left on device", str(file))
        return savefig(self, file, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", full_disk_on_the_second)
    with pytest.raises(WriteError) as raised:
        build_report(tmp_path / "runs", out, reps=REPS)
    named = Path(raised.value.filename)  # the figure meant, not its temporary file (`.<stem>.<write>.tmp.png`)
    assert raised.value.errno == 28 and named.parent == out and drawn[1].name.startswith(f".{named.stem}.")
    assert not named.name.startswith(".") and drawn[1].name.endswith(f".tmp{named.suffix}")
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_task_with_long_env_kwargs_gets_figure_names_a_file_system_takes(tmp_path):
    """env_kwargs long enough that a task's label passes 255 bytes: its figures and task folder get cut names that
    end in a digest, so two such tasks keep two names (mutation caught: ENAMETOOLONG at the first figure)."""
    from experiments.studies.runs import SLUG_LENGTH, slug

    for value in ("a" * 300, "a" * 299 + "b"):
        fake_run(tmp_path / "runs" / value[-1], "gtrxl", 0, 0.5, curve=[0.5], env_kwargs={"word": value})
    build_report(tmp_path / "runs", tmp_path / "out", reps=REPS)
    figures = [path.name for path in (tmp_path / "out").glob("*.png")]
    assert len([name for name in figures if "word" in name]) == 4, figures
    assert all(len(name.encode()) <= 255 for name in figures), figures
    first, second = slug("word=" + "a" * 300), slug("word=" + "a" * 299 + "b")
    assert len(first) == len(second) == SLUG_LENGTH and first != second


@pytest.mark.parametrize(("arguments", "message"), [
    ({"study_dir": None}, "study_dir=None: expected a non-empty path"),
    ({"study_dir": 5}, "study_dir=5: expected a non-empty path"),
    ({"out_dir": ""}, "out_dir='': expected a non-empty path"),
    ({"out_dir": 5}, "out_dir=5: expected a non-empty path"),
    ({"envs": "TMaze-v0"}, "envs='TMaze-v0': expected a list of env id patterns"),
])
def test_build_report_refuses_arguments_of_another_type_before_writing(tmp_path, monkeypatch, arguments, message):
    fake_run(tmp_path / "study", "mlp", 0, 1.0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        build_report(**{"study_dir": tmp_path / "study", "out_dir": tmp_path / "out", **arguments})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study"]


def test_bootstrap_resamples_beyond_what_memory_holds_are_refused_before_any_analysis(tmp_path, capsys):
    """rliable holds every resample at once: 2³¹ − 1 of them (an integer flag's limit) needed 48 GiB and ended in a
    MemoryError traceback after a study had trained."""
    with pytest.raises(ValueError, match=r"^reps=2147483647: expected an integer in \[1, 50000\]"):
        build_report(tmp_path, reps=2**31 - 1)
    for command in (["report", str(tmp_path)], ["plot", str(tmp_path)], ["--seed", "0", "1"]):
        assert train_rl.main([*command, "--reps", "50001", "--log-dir", str(tmp_path / "runs")]
                             if command[0] == "--seed" else [*command, "--reps", "50001"]) == 2
        assert capsys.readouterr().err.startswith("error: --reps=50001: expected an integer in [1, 50000]")
    assert not (tmp_path / "runs").exists()
