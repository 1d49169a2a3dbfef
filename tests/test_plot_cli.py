"""``train_rl.py plot``: learning curves of any run directories, grouped by configuration keys, drawn by
the study report's own figure code."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.image
import pytest
import yaml

import train_rl
from experiments.run_dir import EVAL_COLUMNS
from experiments.studies import plotting, report

STEPS = (100, 200, 300)


def make_run(directory: Path, backbone: str, seed: int, env: str = "TMaze-v0", finished: bool = True) -> Path:
    """A run directory as training leaves it: config.yaml, evaluations.csv and (finished) summary.json."""
    run = directory / f"{env}__ppo-{backbone}__{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"algo": "ppo", "backbone": backbone, "env": env,
                                                     "env_kwargs": {"length": 5}, "seed": seed}))
    with (run / "evaluations.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, EVAL_COLUMNS)
        writer.writeheader()
        for i, steps in enumerate(STEPS):
            rate = min(1.0, 0.3 * i + 0.1 * seed)
            writer.writerow({"timesteps": steps, "mean_return": rate, "std_return": 0.1, "mean_length": 5,
                             "success_rate": rate, "wall_seconds": i, "stochastic_mean_return": rate,
                             "stochastic_success_rate": rate})
    if finished:
        (run / "summary.json").write_text(json.dumps({
            "env_steps": STEPS[-1], "final_mean_return": 0.6, "final_std_return": 0.1, "final_success_rate": 0.6}))
    return run


@pytest.fixture
def runs(tmp_path):
    for backbone in ("gtrxl", "lstm"):
        for seed in (0, 1):
            make_run(tmp_path / "runs", backbone, seed)
    return tmp_path / "runs"


def test_plot_groups_runs_by_what_differs_and_writes_a_png(runs, tmp_path, capsys):
    out = tmp_path / "figures" / "curves.png"
    assert train_rl.main(["plot", str(runs), "--out", str(out), "--reps", "50"]) == 0
    assert f"{out}: 4 runs in 2 groups: gtrxl (2), lstm (2)" in capsys.readouterr().out
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


@pytest.mark.parametrize("title", ["$x^$", r"cost in $ (\bogus{$)"])
def test_a_title_is_drawn_as_written_not_parsed_as_mathtext(title, runs, tmp_path):
    """A `$` a user writes is text (matplotlib parsed `$x^$` as mathtext and failed with a traceback)."""
    out = tmp_path / "titled.png"
    assert train_rl.main(["plot", str(runs), "--title", title, "--out", str(out), "--reps", "50"]) == 0
    assert matplotlib.image.imread(out).ndim == 3


def test_plot_takes_run_directories_and_any_grouping_key(runs, tmp_path, capsys):
    chosen = [str(path) for path in sorted(runs.iterdir())[:3]]
    out = tmp_path / "seeds.png"
    assert train_rl.main(["plot", *chosen, "--out", str(out), "--group-by", "seed", "--reps", "50"]) == 0
    assert "3 runs in 2 groups: 0 (2), 1 (1)" in capsys.readouterr().out
    out = tmp_path / "tasks.png"
    assert train_rl.main(["plot", *chosen, "--out", str(out), "--group-by", "backbone", "task", "--reps", "50"]) == 0
    assert "gtrxl / TMaze-v0 (length=5) (2), lstm / TMaze-v0 (length=5) (1)" in capsys.readouterr().out


def test_plot_groups_by_a_key_inside_a_section_and_labels_runs_without_it(runs, tmp_path, capsys):
    """`ppo.gamma` reads a key inside a section; a run whose configuration lacks it (another learner's) is `-`."""
    for path, gamma in zip(sorted(runs.iterdir())[:2], (0.9, 0.99), strict=True):
        config = yaml.safe_load((path / "config.yaml").read_text())
        (path / "config.yaml").write_text(yaml.safe_dump({**config, "ppo": {"gamma": gamma}}))
    assert train_rl.main(["plot", str(runs), "--out", str(tmp_path / "g.png"), "--group-by", "ppo.gamma",
                          "--reps", "50"]) == 0
    assert "4 runs in 3 groups: 0.9 (1), 0.99 (1), - (2)" in capsys.readouterr().out
    assert train_rl.main(["plot", str(runs), "--out", str(tmp_path / "h.png"), "--group-by", "ppo.lambda"]) == 2
    assert "--group-by 'ppo.lambda': not a run setting of any of the runs" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--group-by", "colour"], "--group-by 'colour': not a run setting of any of the runs"),
    (["missing-dir"], "'missing-dir' holds no run that plot can read"),
    (["--out", "curves.txt"], "--out='curves.txt': expected a file name ending in an image format"),
])
def test_bad_input_exits_2_naming_it(argv, message, runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = [] if "--out" in argv else ["--out", str(tmp_path / "x.png")]
    assert train_rl.main(["plot", str(runs), *argv, *out]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_the_report_draws_its_curves_with_the_plot_commands_code(runs):
    assert report.curves_figure is plotting.curves_figure
    report.build_report(runs, reps=50)
    assert [path.name for path in runs.glob("curves_*.png")] == ["curves_TMaze_v0_length_5.png"]


def test_by_default_runs_are_grouped_by_what_differs_between_them(tmp_path, capsys):
    for env in ("TMaze-v0", "MemoryChain-v0"):
        make_run(tmp_path / "runs", "gtrxl", 0, env=env)
    make_run(tmp_path / "runs", "gtrxl", 1, env="MemoryChain-v0", finished=False)
    assert train_rl.main(["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "x.png"), "--reps", "50"]) == 0
    assert "3 runs in 2 groups: MemoryChain-v0 (length=5) (2), TMaze-v0 (length=5) (1)" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["evaluations.csv", "config.yaml"])
def test_a_run_plot_cannot_read_is_skipped_on_one_line(damage, runs, tmp_path, capsys):
    """A garbled file of one run: `plot` names the run and skips it, as `report` does, and draws the others."""
    broken = runs / "TMaze-v0__ppo-lstm__1"
    if damage == "evaluations.csv":
        (broken / damage).write_bytes(b"timesteps,mean_return\n\xff\xfe100,0.5\n")  # not UTF-8
    else:
        (broken / damage).write_text("algo: [ppo\n")
    assert train_rl.main(["plot", str(runs), "--out", str(tmp_path / "x.png"), "--reps", "50"]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("plot: skipping run")]
    assert len(skipped) == 1 and "TMaze-v0__ppo-lstm__1" in skipped[0]
    assert "3 runs" in captured.out and (tmp_path / "x.png").is_file()


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_language_model_run_among_the_runs_is_skipped_as_such(command, runs, tmp_path, capsys):
    """`lm train` runs have a config.yaml too: `plot` and `report` name them as language-model runs, skip them
    and read the others (finished or not, an LM run has no env or learner to group by)."""
    lm = ["lm", "train", "-p", f"log_dir={runs}", "data=copy", "steps=2", "segment_length=8", "batch_size=2",
          "copy_tokens=2000", "backbone_options.d_model=16", "backbone_options.n_heads=2",
          "backbone_options.n_layers=1", "backbone_options.memory_length=8", "eval_segments=1"]
    for seed in (0, 1):
        assert train_rl.main([*lm, f"seed={seed}"]) == 0
    (unfinished,) = runs.glob("copy__lm-*__1")
    (unfinished / "summary.json").unlink()  # one finished, one not
    capsys.readouterr()
    out = ["--out", str(tmp_path / ("x.png" if command == "plot" else "report"))]
    assert train_rl.main([command, str(runs), *out, "--reps", "50"]) == 0
    skipped = [line for line in capsys.readouterr().err.splitlines() if "skipping run" in line]
    assert len(skipped) == 2 and all("copy__lm-" in line and "language-model run" in line for line in skipped)


@pytest.mark.parametrize(("command", "message"), [
    (["plot", "", "--out", "q.png"], "error: RUN_DIR='': expected a non-empty path"),
    (["report", ""], "error: DIR='': expected a non-empty path"),
])
def test_an_empty_path_names_nothing_and_is_refused_before_reading_the_current_folder(runs, tmp_path, monkeypatch,
                                                                                    capsys, command, message):
    monkeypatch.chdir(runs)  # a folder full of runs: the empty path must not stand for it
    before = sorted(p.name for p in runs.iterdir())
    assert train_rl.main(command) == 2
    assert capsys.readouterr().err.strip() == message
    assert sorted(p.name for p in runs.iterdir()) == before
