"""A run directory through the real CLI: never reused by a new run, one writer at a time, --resume a
no-op on a finished run, a resume that rewinds every log (also before the first checkpoint), falls
back past a checkpoint that does not load, and a guard message that says where the run can restart."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import train_rl
from experiments.run_dir import LOCK_FILE, RunDirectory, read_records
from tests.test_cli import REPO, TINY

RUN = "TMaze-v0__ppo-gtrxl__0"


def _main(log_dir: Path, steps: int, *argv: str) -> int:
    return train_rl.main([*TINY, "--log-dir", str(log_dir), "-n", str(steps), "--threads", "1", *argv])


def _hashes(directory: Path) -> dict[str, tuple[str, int]]:
    """Content hash and modification time of every file (and folder) below ``directory``."""
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "",
                                            p.stat().st_mtime_ns) for p in sorted(directory.rglob("*"))}


def _steps(run: Path) -> list[int]:
    return [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())]


def _scalars(run: Path) -> list[tuple[str, int]]:
    """Every (tag, step) in the run's tensorboard event files."""
    from tensorboard.compat.proto.event_pb2 import Event

    events = (Event.FromString(r) for path in run.glob("*/events.out.tfevents.*") for r in read_records(path))
    return [(value.tag, event.step) for event in events for value in event.summary.value]


def _kill_after_the_run(run: Path, keep_checkpoints: bool) -> None:
    """Make a finished run look killed before its summary (and, unless ``keep_checkpoints``, before its
    first checkpoint), as SIGKILL at that moment leaves it."""
    for name in ("summary.json", "model.zip"):
        (run / name).unlink()
    if not keep_checkpoints:
        for checkpoint in (run / "checkpoints").iterdir():
            checkpoint.unlink()
        (run / "progress.json").unlink()


def test_a_new_run_never_reuses_a_directory_holding_a_run(tmp_path: Path, capsys):
    assert _main(tmp_path, 64) == 0
    run = tmp_path / RUN
    _kill_after_the_run(run, keep_checkpoints=True)
    before = _hashes(run)
    assert _main(tmp_path, 64) == 2
    assert "already holds an unfinished run (last checkpoint at step 64); add --resume" in capsys.readouterr().err
    assert _hashes(run) == before


def test_resume_on_a_finished_run_changes_nothing(tmp_path: Path, capsys):
    """Mutation caught: resuming a finished run as any other (it rewrote model.zip, the last checkpoint,
    progress.json and the summary)."""
    assert _main(tmp_path, 64) == 0
    before = _hashes(tmp_path)
    assert _main(tmp_path, 64, "--resume") == 0
    assert "already finished (64 steps of 64): nothing to resume, nothing changed" in capsys.readouterr().err
    assert _hashes(tmp_path) == before


def test_resume_before_the_first_checkpoint_restarts_with_empty_logs(tmp_path: Path, capsys):
    """A run killed before its first checkpoint wrote rows 64, 128, 64, 128 and its tensorboard scalars
    twice when resumed (mutation caught: rewinding only when a checkpoint exists)."""
    assert _main(tmp_path, 128) == 0
    run = tmp_path / RUN
    _kill_after_the_run(run, keep_checkpoints=False)
    assert _steps(run) == [64, 128] and _scalars(run)
    assert _main(tmp_path, 128, "--resume") == 0
    assert "nothing to resume in" in capsys.readouterr().err
    assert _steps(run) == [64, 128]
    scalars = _scalars(run)
    assert len(scalars) == len(set(scalars)) and ("eval/mean_reward", 128) in scalars
    assert json.loads((run / "summary.json").read_text())["resumed_from"] is None


def test_a_checkpoint_that_does_not_load_is_named_and_the_one_before_is_used(tmp_path: Path, capsys):
    assert _main(tmp_path, 128) == 0
    run = tmp_path / RUN
    _kill_after_the_run(run, keep_checkpoints=True)
    latest = run / "checkpoints" / "model_128_steps.zip"
    latest.write_bytes(latest.read_bytes()[:1000])
    assert _main(tmp_path, 192, "--resume") == 0
    err = capsys.readouterr().err
    assert f"checkpoint {str(latest)!r} does not load" in err and "model_64_steps.zip' (64 steps)" in err
    assert json.loads((run / "summary.json").read_text())["resumed_from"] == 64
    assert _steps(run) == [64, 128, 192]
    assert (run / "checkpoints" / "model_128_steps.zip.unloadable").stat().st_size == 1000


def test_when_no_checkpoint_loads_the_run_is_left_as_it_is(tmp_path: Path, capsys):
    assert _main(tmp_path, 128) == 0
    run = tmp_path / RUN
    _kill_after_the_run(run, keep_checkpoints=True)
    for checkpoint in (run / "checkpoints").iterdir():
        checkpoint.write_bytes(b"PK")
    before = _hashes(run)
    assert _main(tmp_path, 192, "--resume") == 2
    assert "none of the 2 checkpoints in" in capsys.readouterr().err
    after = _hashes(run)
    assert after.pop(LOCK_FILE) != before.pop(LOCK_FILE) and after == before  # only the lock's holder changed


@pytest.mark.parametrize("written", [[], ["config.yaml"]])
def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path: Path, capsys, written: list[str]):
    """Whether the holder has written files yet or not, the message names it (mutation caught: the check of
    a directory holding a run ignoring the lock, which said "already holds an unfinished run")."""
    with RunDirectory(tmp_path / RUN).lock():
        for name in written:
            (tmp_path / RUN / name).write_text("")
        before = _hashes(tmp_path / RUN)
        assert _main(tmp_path, 64) == 2
        assert _main(tmp_path, 64, "--resume") == 2
        assert _hashes(tmp_path / RUN) == before
    err = capsys.readouterr().err
    assert err.count(f"is being written by process {os.getpid()} on ") == 2


@pytest.mark.parametrize("checkpoint_freq,note", [
    ("64", r"the last checkpoint before it is '.*model_64_steps.zip' \(step 64\)"),
    ("0", r"no checkpoint was saved before it \('.*checkpoints' holds none\)"),
])
def test_the_guard_message_says_whether_a_checkpoint_exists(tmp_path: Path, capsys, checkpoint_freq, note):
    code = _main(tmp_path, 4096, "--checkpoint-freq", checkpoint_freq, "-p", "ppo.learning_rate=1e30",
                 "ppo.max_grad_norm=1e30")
    assert code == 3
    err = capsys.readouterr().err
    assert re.search(r"training stopped: non-finite .* (at|after) update \d+, timestep \d+: \w", err)
    assert re.search(note, err) and "kept" not in err


def _start(log_dir: Path, steps: int) -> subprocess.Popen:
    argv = [sys.executable, str(REPO / "train_rl.py"), *TINY, "--log-dir", str(log_dir), "-n", str(steps),
            "--threads", "1"]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_runs_started_at_once_never_mix(tmp_path: Path):
    processes = [_start(tmp_path, 1024), _start(tmp_path, 1024)]
    outcomes = sorted((p.wait(), p.stderr.read(), p.pid) for p in processes)
    (ok, _, winner), (refused, message, _) = outcomes
    assert (ok, refused) == (0, 2) and f"is being written by process {winner} on " in message
    run = tmp_path / RUN
    assert _steps(run) == list(range(64, 1025, 64))
    assert len(_scalars(run)) == len(set(_scalars(run)))


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["first evaluation", "second checkpoint"])
def test_killed_and_resumed_the_history_has_each_step_once(tmp_path: Path, moment: str):
    """SIGKILL at a moment, a rerun without --resume refused leaving every byte, then --resume: each
    evaluation and each tensorboard scalar once, in order, and the rows kept byte for byte."""
    run, total = tmp_path / RUN, 2048
    process = _start(tmp_path, total)
    ready = {"first evaluation": lambda: (run / "evaluations.csv").exists(),
             "second checkpoint": lambda: len(list(run.glob("checkpoints/model_*_steps.zip"))) >= 2}[moment]
    deadline = time.time() + 120
    while time.time() < deadline and not ready():
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run / "summary.json").exists()
    before, rows_before = _hashes(run), (run / "evaluations.csv").read_text().splitlines(keepends=True)
    assert _main(tmp_path, total) == 2 and _hashes(run) == before
    assert _main(tmp_path, total, "--resume") == 0
    resumed = json.loads((run / "summary.json").read_text())["resumed_from"] or 0
    assert _steps(run) == list(range(64, total + 1, 64))
    kept = "".join(rows_before[:1] + [r for r in rows_before[1:] if int(r.split(",")[0]) <= resumed])
    assert (run / "evaluations.csv").read_text().startswith(kept)
    scalars = _scalars(run)
    assert len(scalars) == len(set(scalars))
    assert sorted(s for t, s in scalars if t == "eval/mean_reward") == list(range(64, total + 1, 64))
