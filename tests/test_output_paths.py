"""Output paths of `plot`, `report` and `evaluate --record`: a file already on disk that the command did not write is
never overwritten (refused with exit status 2 and one line before any work, or, for a default name the user did not
choose, written beside it), a report rebuilds only its own earlier output, and a path that holds no run these
commands can read (a language-model run) is refused in one line."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

import train_rl
from experiments.config import ConfigError
from experiments.run_dir import EVAL_COLUMNS
from experiments.studies import plotting
from experiments.studies.report import build_report, is_own_report, sign
from experiments.studies.runs import find_runs
from experiments.video import write_video
from experiments.writable import write_new_file

REPS = ["--reps", "20"]


def make_run(root: Path, backbone: str, seed: int) -> Path:
    """A finished training run as `experiments.training` leaves it: config.yaml, evaluations.csv, summary.json."""
    run = root / f"TMaze-v0__ppo-{backbone}__{seed}"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"algo": "ppo", "backbone": backbone, "env": "TMaze-v0",
                                                     "env_kwargs": {"length": 5}, "seed": seed}))
    with (run / "evaluations.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, EVAL_COLUMNS)
        writer.writeheader()
        for i, steps in enumerate((100, 200)):
            writer.writerow({"timesteps": steps, "mean_return": 0.5 * i, "std_return": 0.1, "mean_length": 5,
                             "success_rate": 0.5 * i, "wall_seconds": i})
    (run / "summary.json").write_text(json.dumps({"env_steps": 200, "final_mean_return": 0.5,
                                                  "final_std_return": 0.1, "final_success_rate": 0.5}))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    for backbone in ("gtrxl", "lstm"):
        make_run(tmp_path / "runs", backbone, 0)
    return tmp_path / "runs"


@pytest.fixture
def lm_runs(tmp_path: Path) -> Path:
    """A folder holding one language-model run as `lm train` leaves it (its config.yaml names data, no env or learner;
    `tests/test_plot_cli.py` trains a real one)."""
    run = tmp_path / "lm" / "copy__lm-gtrxl__0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"data": "copy", "backbone": "gtrxl", "steps": 2, "seed": 0,
                                                     "backbone_options": {"d_model": 16}}))
    (run / "evaluations.csv").write_text("step,valid_bits_per_token\n2,4.0\n")
    (run / "summary.json").write_text(json.dumps({"steps": 2, "valid_bits_per_token": 4.0}))
    return tmp_path / "lm"


def run_cli(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    """Exit status, stdout and the lines of stderr of `train_rl.py ARGV`."""
    code = train_rl.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


def refused(argv: list[str], capsys, *named: str) -> None:
    """`argv` exits 2 with one line on stderr that holds each of `named`."""
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert len(err) == 1 and all(part in err[0] for part in named), err


# --------------------------------------------------------------------------------------------
# plot --out, evaluate --record: new files only


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_plot_refuses_an_out_file_that_exists_before_reading_any_run(kind, runs, tmp_path, capsys):
    out = tmp_path / "mine.png"
    if kind == "file":
        out.write_bytes(b"mine")
    else:
        out.symlink_to(tmp_path / "nowhere.png")
    refused(["plot", str(tmp_path / "no-such-runs"), "--out", str(out)], capsys,
            f"--out {str(out)!r}: already exists", "never overwritten")
    assert out.is_symlink() if kind != "file" else out.read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.png", "runs"]


def test_plot_without_out_writes_beside_an_earlier_curves_png(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "curves.png").write_bytes(b"mine")
    code, out, _ = run_cli(["plot", str(runs), *REPS], capsys)
    assert code == 0 and out.startswith("curves-2.png: 2 runs")
    assert (tmp_path / "curves.png").read_bytes() == b"mine" and (tmp_path / "curves-2.png").stat().st_size > 1000
    code, out, _ = run_cli(["plot", str(runs), *REPS], capsys)
    assert code == 0 and out.startswith("curves-3.png: ")


def test_plot_counts_a_run_named_by_several_paths_once(runs, tmp_path, capsys):
    one = sorted(runs.iterdir())[0]
    code, out, _ = run_cli(["plot", str(runs), str(one), str(one), "--out", str(tmp_path / "c.png"), *REPS], capsys)
    assert code == 0 and "2 runs in 2 groups" in out


def test_evaluate_refuses_a_record_file_that_exists_before_loading_the_model(tmp_path, capsys):
    video = tmp_path / "clip.gif"
    video.write_bytes(b"mine")
    refused(["evaluate", str(tmp_path / "no-such-run"), "--record", str(video)], capsys,
            f"--record {str(video)!r}: already exists")
    assert video.read_bytes() == b"mine"


@pytest.mark.parametrize("inside", ["", "checkpoints"])
def test_plot_and_record_refuse_a_path_in_a_run_directory_before_any_work(runs, capsys, inside):
    """`plot --out` and `evaluate --record` are refused at any depth of a run directory, whose files they would mix
    with, and nothing is written (mutation caught: both wrote into the run, its checkpoints folder too)."""
    run = runs / "TMaze-v0__ppo-gtrxl__0"
    (run / "run.lock").write_text("123 host\n")
    (run / "checkpoints").mkdir()
    before = sorted(run.rglob("*"))
    for argv, flag, name in ((["plot", str(runs)], "--out", "c.png"), (["evaluate", str(run)], "--record", "v.gif")):
        path = run / inside / name
        refused([*argv, flag, str(path)], capsys, f"{flag} {str(path)!r}: would be inside the run directory "
                                                  f"{str(run)!r} (run.lock)")
    assert sorted(run.rglob("*")) == before


def test_the_python_writers_of_plot_and_record_never_replace_a_file(runs, tmp_path):
    """The API twins: `write_video` and `plot_curves` raise `FileExistsError` and leave the file as it was."""
    frames = [np.zeros((8, 8, 3), dtype=np.uint8)] * 2
    video, figure = tmp_path / "clip.gif", tmp_path / "curves.png"
    for path in (video, figure):
        path.write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        write_video(frames, video, fps=4)
    with pytest.raises(FileExistsError):
        plotting.plot_curves({"all": find_runs(runs)}, True, "t", figure, reps=20, seed=0)
    assert video.read_bytes() == figure.read_bytes() == b"mine"
    assert write_video(frames, tmp_path / "new.gif", fps=4).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.gif", "curves.png", "new.gif", "runs"]


def test_a_file_made_by_another_process_while_the_new_one_is_written_is_kept(tmp_path):
    target = tmp_path / "c.png"

    def writer(tmp: Path) -> None:
        tmp.write_bytes(b"ours")
        target.write_bytes(b"theirs")  # another process, meanwhile

    with pytest.raises(FileExistsError):
        write_new_file(target, writer)
    assert target.read_bytes() == b"theirs" and [p.name for p in tmp_path.iterdir()] == ["c.png"]


# --------------------------------------------------------------------------------------------
# report: its own earlier output only


def test_report_refuses_a_report_md_it_did_not_write_before_any_work(runs, tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "report.md").write_text("# My notes\n")
    refused(["report", str(runs), "--out", str(out)], capsys,
            f"--out {str(out)!r}: holds a report.md that train_rl.py report did not write", "another --out DIR")
    assert [p.name for p in out.iterdir()] == ["report.md"] and (out / "report.md").read_text() == "# My notes\n"
    (runs / "report.md").write_text("# Mine\n")  # the study directory itself, the default
    refused(["report", str(runs)], capsys, f"DIR {str(runs)!r}: holds a report.md", "give --out DIR")
    assert (runs / "report.md").read_text() == "# Mine\n" and not list(runs.glob("*.png"))
    with pytest.raises(ConfigError, match="out_dir .*holds a report.md"):
        build_report(runs, out, reps=20)


@pytest.mark.parametrize("out", [None, "run", "run/report"])
def test_a_report_is_never_written_into_a_run_directory(runs, tmp_path, capsys, out):
    """A training run's directory (its run.lock) reported alone: without --out, and with a --out at or inside it,
    the report is refused in one line before any work, from the command and from Python, and the run's files are as
    they were; a --out elsewhere takes it."""
    run = runs / "TMaze-v0__ppo-gtrxl__0"
    (run / "run.lock").touch()
    before = sorted(path.name for path in run.rglob("*"))
    given = [] if out is None else ["--out", str(tmp_path / out.replace("run", str(run.relative_to(tmp_path))))]
    message = (f"DIR={str(run)!r} without --out: the report directory {str(run)!r} is the run directory" if out is None
               else "inside the run directory" if "/" in out else "is the run directory")
    refused(["report", str(run), *given], capsys, message, "a report would mix with; choose --out outside it")
    with pytest.raises(ConfigError, match="run directory .* a report would mix with; choose out_dir outside it"):
        build_report(run, None if out is None else given[1], reps=20)
    assert sorted(path.name for path in run.rglob("*")) == before
    assert run_cli(["report", str(run), "--out", str(tmp_path / "elsewhere"), *REPS], capsys)[0] == 0


@pytest.mark.parametrize("kind", ["directory", "link to a report it wrote"])
def test_report_refuses_a_report_md_that_is_no_file_of_its_own(kind, runs, tmp_path, capsys):
    out = tmp_path / "out"
    if kind == "directory":
        (out / "report.md").mkdir(parents=True)
    else:
        own = build_report(runs, tmp_path / "own", reps=20)
        out.mkdir()
        (out / "report.md").symlink_to(own)
    refused(["report", str(runs), "--out", str(out)], capsys, f"--out {str(out)!r}: holds a report.md")


def test_report_rebuilds_its_own_report_but_not_one_edited_since(runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(["report", str(runs), "--out", str(out), *REPS], capsys)[0] == 0
    text = (out / "report.md").read_text()
    assert is_own_report(text) and text.splitlines()[-1].startswith("<!-- written by train_rl.py report, sha256 ")
    assert run_cli(["report", str(runs), "--out", str(out), *REPS], capsys)[0] == 0  # rebuilt
    edited = (out / "report.md").read_text().replace("## Runs", "## Runs\n\nMy comment.")
    (out / "report.md").write_text(edited)
    refused(["report", str(runs), "--out", str(out), *REPS], capsys, "(or that was edited since)")
    assert (out / "report.md").read_text() == edited


def test_a_report_written_before_reports_were_signed_is_rebuilt(runs, tmp_path, capsys):
    out = tmp_path / "out"
    build_report(runs, out, reps=20)
    unsigned = (out / "report.md").read_text().rsplit("<!-- written by", 1)[0]
    (out / "report.md").write_text(unsigned)
    assert is_own_report(unsigned) and not is_own_report(unsigned.replace("# Seed study", "# My study"))
    assert run_cli(["report", str(runs), "--out", str(out), *REPS], capsys)[0] == 0
    assert is_own_report((out / "report.md").read_text())
    assert is_own_report(sign("# anything\n")) and not is_own_report(sign("# anything\n") + "more\n")


def test_report_refuses_a_figure_it_did_not_write_and_writes_nothing(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "curves_TMaze_v0_length_5.png").write_bytes(b"mine")
    refused(["report", str(runs), "--out", str(out), *REPS], capsys,
            f"--out {str(out)!r}: holds 'curves_TMaze_v0_length_5.png', which the report would write")
    assert [p.name for p in out.iterdir()] == ["curves_TMaze_v0_length_5.png"]
    assert (out / "curves_TMaze_v0_length_5.png").read_bytes() == b"mine"


def test_every_figure_a_report_writes_is_one_its_report_md_shows(runs, tmp_path):
    """The report.md is written first: a report cut short while it writes its figures leaves only figures that the
    report.md on disk shows, so the next report replaces them rather than refuse them as another's."""
    out = tmp_path / "out"
    build_report(runs, out, reps=20)
    figures = {p.name for p in out.glob("*.png")}
    assert figures and all(f"]({name})" in (out / "report.md").read_text() for name in figures)
    os.remove(out / sorted(figures)[0])  # as if cut short before this figure
    build_report(runs, out, reps=20)
    assert {p.name for p in out.glob("*.png")} == figures


# --------------------------------------------------------------------------------------------
# a path that holds no run plot and report can read


@pytest.mark.parametrize("command,argument", [("plot", "RUN_DIR"), ("report", "DIR")])
@pytest.mark.parametrize("where", ["the run", "its folder"])
def test_a_language_model_run_is_refused_in_one_line_naming_what_is_expected(command, argument, where, lm_runs,
                                                                             tmp_path, capsys):
    path = next(lm_runs.iterdir()) if where == "the run" else lm_runs
    out = tmp_path / ("c.png" if command == "plot" else "report")
    refused([command, str(path), "--out", str(out), *REPS], capsys,
            f"{argument} {str(path)!r} holds no run that {command} can read", "a language-model run",
            "expected a training run's directory")
    assert not out.exists()


def test_plot_names_a_missing_path_or_a_file_in_one_line(runs, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    for path, why in ((tmp_path / "missing", "it does not exist"), (tmp_path / "a_file", "it is a file")):
        refused(["plot", str(runs), str(path), "--out", str(tmp_path / "c.png")], capsys,
                f"RUN_DIR {str(path)!r} holds no run that plot can read: {why}")
    assert not (tmp_path / "c.png").exists()


def test_a_study_whose_folder_holds_the_users_report_md_is_refused_before_any_run(tmp_path, capsys):
    """The study's own report would replace a report.md it did not write: refused with one line before a run is
    made (mutation caught: the runs trained, then the report failed at the end); `--no-report` runs it."""
    folder = tmp_path / "runs" / "mine"
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("# my notes\n")
    file = tmp_path / "study.yaml"
    file.write_text(yaml.safe_dump({"name": "mine", "settings": {"env": "TMaze-v0", "total_timesteps": 64,
                                                                 "n_envs": 1, "eval_freq": 0, "n_eval_episodes": 1},
                                    "backbones": ["mlp"], "seeds": [0]}))
    argv = ["study", str(file), "--log-dir", str(tmp_path / "runs")]
    assert train_rl.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a report.md that train_rl.py report did not write" in err[0], err
    assert "--no-report" in err[0] and sorted(path.name for path in folder.iterdir()) == ["report.md"]
    assert train_rl.main([*argv, "--no-report"]) == 0
    assert (folder / "report.md").read_text() == "# my notes\n"


@pytest.mark.parametrize("name", ["~/out", "new /out", " new/out"])
def test_every_output_path_refuses_a_name_not_as_meant_before_any_work(name, runs, tmp_path, capsys, monkeypatch):
    """An unexpanded '~' or a folder name with white space around it is refused by every command's output path, as
    `--log-dir` refuses it, and nothing is made (mutation caught: `plot`, `report`, `inspect` and `evaluate` made
    a folder named '~')."""
    monkeypatch.chdir(tmp_path)
    run = runs / "TMaze-v0__ppo-gtrxl__0"
    for argv, flag, leaf in ((["plot", str(runs)], "--out", "c.png"), (["report", str(runs)], "--out", ""),
                             (["evaluate", str(run)], "--record", "v.gif"), (["inspect", str(run)], "--out", "")):
        path = f"{name}/{leaf}".rstrip("/")
        refused([*argv, flag, path], capsys, f"{flag} {path!r}: ")
    assert sorted(tmp_path.iterdir()) == [runs]
