"""The pieces of a run directory's guarantees, on files made by hand: the one-writer lock, atomic
writes, the rewind of every log to a step (tensorboard included), and a report
that names and skips a run it cannot read."""

from __future__ import annotations

import contextlib
import csv
import json
import os
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from envs.atomic import atomic_path, new_directory, write_atomic
from experiments import run_dir
from experiments.run_dir import EVAL_COLUMNS, LOCK_FILE, EvalLog, RunBusyError, RunDirectory, rewind_tensorboard
from experiments.studies.report import build_report


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path):
    """flock locks belong to an open file, so a second open in this process stands for a second process
    (mutation caught: no flock, both enter)."""
    run = RunDirectory(tmp_path / "run")
    with run.lock():
        assert (run / LOCK_FILE).read_text().split()[0] == str(os.getpid())
        with pytest.raises(RunBusyError, match=rf"being written by process {os.getpid()} on "), \
                RunDirectory(tmp_path / "run").lock():
            pass
        with pytest.raises(RunBusyError, match=rf"being written by process {os.getpid()} on "):
            RunDirectory(tmp_path / "run").check_not_busy()
    with run.lock():  # released with the first holder
        pass
    run.check_not_busy()
    assert not run.holds_run(), "a lock file alone is not a run"


def test_a_process_refused_the_lock_of_a_folder_it_made_leaves_the_holders_lock_and_folder(tmp_path: Path,
                                                                                            monkeypatch):
    """Two processes start one run at once: one makes the folder, the other takes its lock first. The refused one
    removes nothing (it removed the holder's lock file and folder, so that a third could lock a new one)."""
    stack = contextlib.ExitStack()
    real_busy, taken = run_dir._busy, []

    def another_locks_first(handle: object, path: Path) -> object:
        if not taken:
            taken.append(True)
            stack.enter_context(RunDirectory(path).lock())  # a second open file stands for another process
        return real_busy(handle, path)

    monkeypatch.setattr(run_dir, "_busy", another_locks_first)
    with stack:
        with pytest.raises(RunBusyError), RunDirectory(tmp_path / "run").lock():
            pass
        assert (tmp_path / "run" / LOCK_FILE).read_text().split()[0] == str(os.getpid())  # the holder's, kept


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path: Path):
    """Each write has its own temporary name, so a second writer of the same file cannot rename the first one's
    away (two ``report`` commands on one study)."""
    path = tmp_path / "report.md"
    with atomic_path(path) as first, atomic_path(path) as second:
        first.write_text("first")
        second.write_text("second")
        assert first != second and first.parent == second.parent == tmp_path and first.name.startswith(".report.")
    assert path.read_text() == "first" and sorted(tmp_path.iterdir()) == [path]


def test_two_commands_writing_into_one_new_directory_get_one_each(tmp_path: Path):
    """`new_directory` claims its folder for the block (two ``inspect`` of one run at once shared ``inspect/``, and
    one removed the other's figures); an empty folder is taken as it is, and a failing block leaves what it found."""
    (tmp_path / "out").mkdir()
    with new_directory(tmp_path / "out") as first, new_directory(tmp_path / "out") as second:
        assert (first, second) == (tmp_path / "out", tmp_path / "out-2")
        (first / "a.png").write_text("a")
    with pytest.raises(KeyboardInterrupt), new_directory(tmp_path / "new") as third:
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.png", "out", "out-2"] and third.name == "new"


def test_an_interrupted_write_leaves_the_old_file(tmp_path: Path):
    path = tmp_path / "summary.json"
    write_atomic(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new \ud800")  # fails halfway through writing
    assert path.read_text() == "old"


def _rows(*steps: int) -> list[dict[str, object]]:
    return [{**dict.fromkeys(EVAL_COLUMNS, 0.0), "timesteps": s, "mean_return": float(s)} for s in steps]


def _scalars(directory: Path) -> list[tuple[str, int]]:
    """Every (tag, step) tensorboard reads back from the run's event folders."""
    found = []
    for folder in sorted(p for p in directory.iterdir() if p.is_dir() and p.name.startswith("MemoryPPO_")):
        accumulator = EventAccumulator(str(folder))
        accumulator.Reload()
        found += [(tag, event.step) for tag in accumulator.Tags()["scalars"] for event in accumulator.Scalars(tag)]
    return sorted(found)


def test_tensorboard_is_rewound_to_the_step(tmp_path: Path):
    """Events after the step go, in every file; a file (and folder) left with none goes; a record cut
    short by a kill is dropped; tensorboard reads the result (mutation caught: ``step < steps``)."""
    writer = SummaryWriter(str(tmp_path / "MemoryPPO_1"))
    for step in (1, 2, 3, 4, 5):
        writer.add_scalar("eval/mean_reward", step, step)
    writer.close()
    (old,) = (tmp_path / "MemoryPPO_1").iterdir()
    with old.open("ab") as f:
        f.write(b"\x10\x00\x00")  # a record cut short
    later = SummaryWriter(str(tmp_path / "MemoryPPO_2"))
    later.add_scalar("eval/mean_reward", 9.0, 9)
    later.close()
    rewind_tensorboard(tmp_path, 3)
    assert _scalars(tmp_path) == [("eval/mean_reward", 1), ("eval/mean_reward", 2), ("eval/mean_reward", 3)]
    assert not (tmp_path / "MemoryPPO_2").exists()


def test_rewind_drops_every_record_after_the_step(tmp_path: Path):
    run = RunDirectory(tmp_path)
    for row in _rows(64, 128, 192):
        run.evaluations.append(row)
    run.record_progress(192, 3.0, {64: 1.0, 128: 2.0, 192: 3.0})
    (tmp_path / "summary.json").write_text(json.dumps({"env_steps": 192}))
    (tmp_path / "model.zip").write_text("final")
    (tmp_path / "best_model.json").write_text(json.dumps({"timesteps": 192, "mean_return": 1.0}))
    (tmp_path / "best_model.zip").write_text("best")
    (tmp_path / ".summary.tmp.json").write_text("half")
    assert run.rewind(128) == 2.0
    assert [int(r["timesteps"]) for r in csv.DictReader((tmp_path / "evaluations.csv").open())] == [64, 128]
    assert json.loads((tmp_path / "progress.json").read_text()) == {
        "timesteps": 128, "wall_seconds": 2.0, "checkpoints": {"64": 1.0, "128": 2.0}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evaluations.csv", "progress.json"]
    assert run.rewind(0) == 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evaluations.csv"]
    assert (tmp_path / "evaluations.csv").read_text().strip() == ",".join(EVAL_COLUMNS)


def _fake_run(directory: Path, steps: list[int]) -> None:
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({"env": "TMaze-v0", "algo": "ppo", "backbone": "gtrxl"}))
    log = EvalLog(directory / "evaluations.csv")
    for row in _rows(*steps):
        log.append({**row, "success_rate": 0.5})
    (directory / "summary.json").write_text(json.dumps({
        "env_steps": steps[-1], "final_mean_return": 0.0, "final_std_return": 0.0, "final_success_rate": 0.5,
        "final_stochastic_mean_return": 0.0, "final_stochastic_success_rate": 0.5}))


def test_the_report_names_and_skips_a_run_it_cannot_read(tmp_path: Path, capsys):
    """A run logged twice over (steps that go back) made the curves crash with "all input arrays must have
    the same shape" (mutation caught: no skipping)."""
    _fake_run(tmp_path / "TMaze-v0__ppo-gtrxl__0", [512, 1024])
    _fake_run(tmp_path / "TMaze-v0__ppo-gtrxl__1", [512, 1024, 512, 1024, 1536])
    (tmp_path / "TMaze-v0__ppo-gtrxl__2").mkdir()
    (tmp_path / "TMaze-v0__ppo-gtrxl__2" / "config.yaml").write_text("- not a mapping")
    report = build_report(tmp_path, reps=20).read_text()
    err = capsys.readouterr().err
    assert "skipping run" in err and "TMaze-v0__ppo-gtrxl__1': evaluations.csv repeats or rewinds its steps " \
                                    "(1024 then 512)" in err
    assert "TMaze-v0__ppo-gtrxl__2': config.yaml is not a mapping" in err
    assert "| TMaze-v0__ppo-gtrxl__0 | finished |" in report and "| TMaze-v0__ppo-gtrxl__1 | unreadable |" in report
    assert "3 runs: 1 finished, 2 unreadable (TMaze-v0__ppo-gtrxl__1: evaluations.csv repeats" in report


@pytest.mark.parametrize("summary", ['{"env_st', "[1, 2]", "{}", '{"env_steps": "512", "final_mean_return": 0.0}',
                                     '{"env_steps": 512, "final_mean_return": "x", "final_std_return": 0.0, '
                                     '"final_success_rate": null}'])
def test_a_damaged_summary_reads_as_no_summary_so_that_resuming_restores_it(tmp_path: Path, summary: str):
    """A `summary.json` that is not a training run's whole summary (not JSON, not an object, fields absent or of
    another type) is read as none: the run is unfinished (a study resumes it from its checkpoint, which writes the
    summary again), and nothing that reads it raises."""
    from experiments.studies.runs import INTERRUPTED, NEW, Run

    directory = tmp_path / "TMaze-v0__ppo-gtrxl__0"
    _fake_run(directory, [512, 1024])
    (directory / "summary.json").write_text(summary)
    (directory / "status.json").write_text("[]")
    run = Run(directory)
    assert run.summary is None and run.state() in (INTERRUPTED, NEW) and run.state(1024) in (INTERRUPTED, NEW)
    assert RunDirectory(directory).finished(512) is None
    assert run.problem() is not None and run.problem().startswith(("summary.json", "status.json"))
