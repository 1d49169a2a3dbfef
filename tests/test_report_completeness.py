"""A study's report counts every run its study.yaml lists, a missing or unreadable one too (named, never scored), so
that statistics over part of the grid never pass for the whole study; and `report --out` never writes into a run
directory, nor into a study or tune study directory other than the one reported: refused with exit 2 and one line
naming `--out`, its value and the owner, before anything is written."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest
import yaml

import train_rl
from tests.test_report import fake_run

RUN = "{env}__ppo-a__{seed}"


def make_study(root: Path, name: str = "s", envs: tuple[str, ...] = ("TMaze-v0",), seeds: int = 3) -> Path:
    """A study directory as `study` leaves it: `study.yaml` listing its runs, its `.lock`, and each run directory
    (finished, with a `run.lock`)."""
    directory = root / name
    runs = []
    for env in envs:
        for seed in range(seeds):
            run = fake_run(directory, "a", seed, 0.2 * seed, env=env, curve=[0.1, 0.2 * seed])
            (run / "run.lock").write_text("123 host\n")
            runs.append(run.name)
    (directory / "study.yaml").write_text(yaml.safe_dump({"name": name, "runs": runs}))
    (directory / ".lock").write_text("")
    return directory


def report(*argv: object) -> int:
    return train_rl.main(["report", *map(str, argv), "--reps", "50"])


def listing(root: Path) -> list[str]:
    """Every path under `root`, with each file's size and modification time."""
    return sorted(f"{p.relative_to(root)}" + ("" if p.is_dir() else f" {p.stat().st_size} {p.stat().st_mtime_ns}")
                  for p in root.rglob("*"))


# -- every listed run is counted --------------------------------------------------------------------------------


def test_a_listed_run_without_its_directory_is_counted_and_named_missing(tmp_path: Path, capsys) -> None:
    study = make_study(tmp_path)
    assert report(study, "--out", tmp_path / "whole") == 0
    assert "3 runs: 3 finished." in (tmp_path / "whole" / "report.md").read_text()
    assert "missing" not in (tmp_path / "whole" / "report.md").read_text()

    shutil.rmtree(study / RUN.format(env="TMaze-v0", seed=0))
    for name in ("config.yaml", "evaluations.csv", "summary.json"):  # a directory left without its run
        (study / RUN.format(env="TMaze-v0", seed=2) / name).unlink()
    capsys.readouterr()
    assert report(study, "--out", tmp_path / "part") == 0
    text = (tmp_path / "part" / "report.md").read_text()
    assert ("3 runs: 1 finished, 2 missing (TMaze-v0__ppo-a__0: no directory; TMaze-v0__ppo-a__2: no config.yaml)."
            in text)
    runs_table = text.split("## Runs")[1]
    assert "| TMaze-v0__ppo-a__0 | missing |" in runs_table and "| TMaze-v0__ppo-a__2 | missing |" in runs_table
    assert "| TMaze-v0__ppo-a__1 | finished |" in runs_table
    err = capsys.readouterr().err
    assert str(study / "TMaze-v0__ppo-a__0") in err and "missing (no directory)" in err


def test_a_report_of_some_envs_counts_the_missing_runs_of_those_envs_only(tmp_path: Path) -> None:
    study = make_study(tmp_path, envs=("TMaze-v0", "MemoryChain-v0"), seeds=2)
    shutil.rmtree(study / RUN.format(env="TMaze-v0", seed=0))
    shutil.rmtree(study / RUN.format(env="MemoryChain-v0", seed=1))
    assert report(study, "--env", "Memory*", "--out", tmp_path / "chain") == 0
    text = (tmp_path / "chain" / "report.md").read_text()
    assert "2 runs: 1 finished, 1 missing (MemoryChain-v0__ppo-a__1: no directory)." in text
    assert "TMaze-v0" not in text
    assert report(study, "--out", tmp_path / "all") == 0
    assert "4 runs: 2 finished, 2 missing (" in (tmp_path / "all" / "report.md").read_text()


@pytest.mark.parametrize(("name", "text", "why"), [
    ("summary.json", '{"final_mean', "summary.json is not JSON ("),
    ("summary.json", "[1, 2]", "summary.json holds a list, not a JSON object"),
    ("summary.json", '{"env_steps": 512}', "summary.json has no final_mean_return, final_std_return, final_success"),
    ("summary.json", '{"env_steps": 1.5, "final_mean_return": 0, "final_std_return": 0, "final_success_rate": null}',
     "summary.json holds env_steps=1.5, not an integer"),
    ("status.json", "\x00garbage", "status.json is not JSON ("),
    ("config.yaml", "- a list\n", "config.yaml is not a mapping"),
    ("config.yaml", "env: TMaze-v0\nalgo: ppo\nbackbone: {a: 1}\n", "config.yaml holds backbone={'a': 1}, not a name"),
    ("config.yaml", "env: TMaze-v0\nalgo: ppo\nbackbone: a\nenv_kwargs: [1]\n",
     "config.yaml holds env_kwargs=[1], not a mapping"),
    ("config.yaml", "env: TMaze-v0\nalgo: ppo\nbackbone: a\na: 5\n", "config.yaml holds a=5, not a mapping"),
    ("config.yaml", "env: TMaze-v0\nalgo: ppo\nbackbone: a\nseed: abc\n",
     "config.yaml holds seed='abc', not an integer"),
])
def test_a_run_the_report_cannot_read_is_counted_and_named_unreadable(tmp_path: Path, capsys, name: str, text: str,
                                                                      why: str) -> None:
    study = make_study(tmp_path)
    damaged = RUN.format(env="TMaze-v0", seed=1)
    (study / damaged / name).write_text(text)
    assert report(study, "--out", tmp_path / "out") == 0
    report_text = (tmp_path / "out" / "report.md").read_text()
    assert f"3 runs: 2 finished, 1 unreadable ({damaged}: {why}" in report_text
    assert f"| {damaged} | unreadable |" in report_text.split("## Runs")[1]
    err = capsys.readouterr().err
    assert f"skipping run {str(study / damaged)!r}: {why}" in err


@pytest.mark.parametrize("column", ["mean_return", "success_rate", "stochastic_success_rate", "timesteps"])
def test_an_evaluation_that_is_no_number_names_its_run_unreadable_in_any_column(tmp_path: Path, capsys,
                                                                                column: str) -> None:
    """Every column the report reads is parsed by the check, not the plotted score's only (mutation caught: a mean
    return that is no number, on a task scored by its success rate, ended the report in a traceback)."""
    study = make_study(tmp_path)
    damaged = RUN.format(env="TMaze-v0", seed=1)
    path = study / damaged / "evaluations.csv"
    rows = list(csv.DictReader(path.open()))
    rows[0][column] = "abc"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert report(study, "--out", tmp_path / "out") == 0
    assert f"3 runs: 2 finished, 1 unreadable ({damaged}: ValueError: " in (tmp_path / "out" / "report.md").read_text()
    assert f"skipping run {str(study / damaged)!r}: ValueError: " in capsys.readouterr().err


@pytest.mark.parametrize("name", ["evaluations.csv", "summary.json", "config.yaml"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_run_file_that_is_a_pipe_or_a_device_is_named_not_read(tmp_path: Path, capsys, name: str, kind: str) -> None:
    """A read of a pipe blocks and one of /dev/zero never ends: the report names the file unreadable unread."""
    study = make_study(tmp_path)
    damaged = RUN.format(env="TMaze-v0", seed=1)
    path = study / damaged / name
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    assert report(study, "--out", tmp_path / "out") == 0
    assert f"1 unreadable ({damaged}: {name} is not a regular file)" in (tmp_path / "out" / "report.md").read_text()
    assert train_rl.main(["plot", str(study / damaged), "--out", str(tmp_path / "x.png")]) == 2
    assert f"{name} is not a regular file" in capsys.readouterr().err


# -- where --out may be -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("inside", ["", "figures", "figures/deeper"])
def test_out_at_or_inside_a_run_directory_is_refused_before_anything_is_written(tmp_path: Path, capsys,
                                                                                inside: str) -> None:
    study = make_study(tmp_path)
    run = study / RUN.format(env="TMaze-v0", seed=1)
    out = run / inside if inside else run
    before = listing(tmp_path)
    assert report(study, "--out", out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: --out={str(out)!r}: ") and f"the run directory {str(run)!r} (run.lock)" in err
    assert listing(tmp_path) == before


def test_out_inside_another_study_or_tune_study_is_refused_and_the_reported_studys_own_folder_is_not(
        tmp_path: Path, capsys) -> None:
    study, other = make_study(tmp_path, "s"), make_study(tmp_path, "other")
    tune = tmp_path / "tune" / "search"
    tune.mkdir(parents=True)
    (tune / "search.json").write_text("{}")
    before = listing(tmp_path)
    for out, owner, marker in ((other, other, "study.yaml"), (other / "figures", other, "study.yaml"),
                               (tune / "figures", tune, "search.json")):
        assert report(study, "--out", out) == 2, out
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"error: --out={str(out)!r}: "), err
        assert f"{str(owner)!r} ({marker}), which is not the directory reported ({str(study)!r})" in err
    assert listing(tmp_path) == before
    for out in (study, study / "figures", tmp_path / "elsewhere"):  # its own folder (the default), or nobody's
        assert report(study, "--out", out) == 0, out
        assert (out / "report.md").is_file()
