"""Machine faults end every command cleanly (docs/run-directories.md, "Exit statuses").

A full disk, a read-only file system or an immutable directory gives exit status 1 (2 where the user named the
path: ``--out``, ``--record``, ``--log-dir``) and one line naming the file and the errno, no traceback; no temporary
file is left, and a run resumes once the fault is mended. SIGINT and SIGTERM at any moment of training (rollout, update,
evaluation, checkpoint write, final save) give 130 and 143, one line, and a run that resumes.

How the faults are made: the tests run as root, which ``chmod`` does not stop, so a read-only directory is a
read-only tmpfs mounted there and a full disk a small tmpfs filled by a file; an immutable directory is
``chattr +i``. Where the machine does not let a test mount or ``chattr``, those rows are skipped, and the simulated
rows (an ``ENOSPC`` or ``EROFS`` raised by the ``fsync`` or ``os.replace`` of the atomic writes) still run.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stable_baselines3.common.base_class import BaseAlgorithm

import train_rl
from envs import atomic
from envs.atomic import WriteError
from experiments import evaluation
from experiments.exits import Received, advise_on_signal, run_command, signals_raised

REPO = Path(__file__).resolve().parents[1]
TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "2", "--threads", "1", "-n", "64",
        "--eval-freq", "32", "--checkpoint-freq", "32", "--n-eval-episodes", "2",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4", "gtrxl.d_model=16",
        "gtrxl.n_heads=2", "gtrxl.memory_length=4", "n_eval_envs=2"]
"""a run of 64 steps: an evaluation and a checkpoint at 32 and 64"""
RUN = "TMaze-v0__ppo-gtrxl__0"
TINY_LM = ["lm", "train", "-p", "data=copy", "steps=1", "segment_length=8", "batch_size=2", "copy_tokens=2000",
           "backbone_options.d_model=16", "backbone_options.n_heads=2", "backbone_options.n_layers=1",
           "backbone_options.memory_length=8", "eval_segments=1"]
"""a language-model run of one step on a short copy stream, with a small Transformer-XL"""


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status and stderr of ``train_rl.py ARGV``."""
    code = train_rl.main(argv)
    return code, capsys.readouterr().err


def one_line(err: str, *named: str) -> str:
    """The single stderr line, checked to name each of ``named`` and to hold no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for text in named:
        assert text in lines[0], lines[0]
    return lines[0]


def temporary_files(directory: Path) -> list[Path]:
    return [path for path in directory.rglob(".*tmp*")]


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` for the block; the test is skipped where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0 if shutil.which("mount") else False
    if not mounted:
        pytest.skip("this machine does not let the test mount a tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, read_only: bool) -> None:
    subprocess.run(["mount", "-o", f"remount,{'ro' if read_only else 'rw'}", str(path)], check=True)


def fill(path: Path, leave: int = 2048) -> Path:
    """Fill the file system of ``path`` but ``leave`` bytes with a file; returns it (remove it to free the space)."""
    filler = path / "filler"
    stats = os.statvfs(path)
    with filler.open("wb") as handle, contextlib.suppress(OSError):
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


def immutable(path: Path, on: bool) -> None:
    if subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not let the test make a directory immutable")


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run, which evaluate, plot and report read."""
    log_dir = tmp_path_factory.mktemp("finished")
    assert train_rl.main([*TINY, "--log-dir", str(log_dir)]) == 0
    return log_dir / RUN


def after_first_checkpoint(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` once, right after the run's first checkpoint is written."""
    original = evaluation.RunCallback.save_checkpoint

    def save_then_act(self: evaluation.RunCallback) -> None:
        original(self)
        if not getattr(self, "_acted", False):
            self._acted = True
            action()

    monkeypatch.setattr(evaluation.RunCallback, "save_checkpoint", save_then_act)


def resumes(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run in ``log_dir`` resumes from its first checkpoint and finishes."""
    code, err = cli([*TINY, "--log-dir", str(log_dir), "--resume"], capsys)
    assert code == 0, err
    assert (log_dir / RUN / "summary.json").exists()
    assert not temporary_files(log_dir)


# ---- full, read-only and immutable disks, command by command


def test_train_on_a_disk_that_fills_ends_with_one_line_and_resumes_once_space_is_back(tmp_path, capsys, monkeypatch):
    with tmpfs(tmp_path / "disk") as disk:
        filler = []
        after_first_checkpoint(monkeypatch, lambda: filler.append(fill(disk)))
        code, err = cli([*TINY, "--log-dir", str(disk)], capsys)
        line = one_line(err, "error: cannot write ", str(disk / RUN), "[Errno 28] No space left on device")
        assert code == 1
        assert not temporary_files(disk), line
        assert (disk / RUN / "checkpoints" / "model_32_steps.zip").exists()
        filler[0].unlink()
        monkeypatch.undo()
        resumes(disk, capsys)


def test_train_and_study_on_a_read_only_file_system_are_refused_with_one_line(tmp_path, capsys):
    """The --log-dir the user names is a bad input there (exit 2, nothing made), as --out is."""
    with tmpfs(tmp_path / "disk") as disk:
        remount(disk, read_only=True)
        for extra in ([], ["--seed", "0", "1", "--workers", "1"]):
            code, err = cli([*TINY, "--log-dir", str(disk / "runs"), *extra], capsys)
            assert code == 2
            one_line(err, f"error: log_dir={str(disk / 'runs')!r}: cannot write in {str(disk)!r}: [Errno 30] "
                          "Read-only file system; expected a directory path")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made")
@pytest.mark.parametrize("command", [[*TINY], [*TINY, "--seed", "0", "1"], ["tune", "--env", "TMaze-v0"],
                                     TINY_LM])
def test_a_log_dir_the_system_will_not_create_is_refused_with_one_line(command, capsys):
    """Every command that makes its folders under a log directory refuses one where no file can be created, by the
    same rule, before it makes anything."""
    log_dir = ["log_dir=/proc/engram-runs"] if command[0] == "lm" else ["--log-dir", "/proc/engram-runs"]
    code, err = cli([*command, *log_dir], capsys)
    assert code == 2
    one_line(err, "error: log_dir='/proc/engram-runs': cannot write in '/proc': [Errno 2]")


def test_train_in_a_directory_made_immutable_midway_ends_with_one_line_and_resumes(tmp_path, capsys, monkeypatch):
    log_dir = tmp_path / "runs"
    after_first_checkpoint(monkeypatch, lambda: immutable(log_dir / RUN, on=True))
    try:
        code, err = cli([*TINY, "--log-dir", str(log_dir)], capsys)
    finally:
        immutable(log_dir / RUN, on=False)
    assert code == 1
    one_line(err, "error: cannot write ", str(log_dir / RUN), "[Errno 1] Operation not permitted")
    assert not temporary_files(log_dir)
    monkeypatch.undo()
    resumes(log_dir, capsys)


@pytest.mark.parametrize("fault, where", [(errno.ENOSPC, "fsync"), (errno.EROFS, "replace")])
def test_a_simulated_fault_of_a_checkpoint_write_ends_with_one_line_and_resumes(fault, where, tmp_path, capsys,
                                                                                monkeypatch):
    """Without a mount: the ``fsync`` (where a delayed allocation fails) or the rename of the first checkpoint
    written after step 32 fails as the file system would."""
    log_dir = tmp_path / "runs"
    original = getattr(atomic.os, where)

    def failing(*args: object) -> None:
        if any("model_64_steps" in str(arg) for arg in args) or where == "fsync" and failing.armed:
            raise OSError(fault, os.strerror(fault))
        original(*args)

    failing.armed = False
    after_first_checkpoint(monkeypatch, lambda: setattr(failing, "armed", where == "fsync"))
    monkeypatch.setattr(atomic.os, where, failing)
    code, err = cli([*TINY, "--log-dir", str(log_dir)], capsys)
    assert code == 1
    one_line(err, "error: cannot write ", str(log_dir / RUN), f"[Errno {fault}] {os.strerror(fault)}")
    assert not temporary_files(log_dir)
    monkeypatch.undo()
    resumes(log_dir, capsys)


@pytest.mark.slow  # long: run by make test-slow
def test_a_tune_whose_workers_fill_the_disk_ends_with_one_line_and_resumes_once_space_is_back(tmp_path, capsys):
    tune = ["tune", "--env", "TMaze-v0", "--env-kwargs", "length=3", "--backbone", "mlp", "-n", "256",
            "--eval-freq", "128", "--n-eval-episodes", "2", "--trials", "12", "--workers", "2", "--threads", "1",
            "--tune-seeds", "1", "-p", "ppo.n_steps=32", "ppo.batch_size=64"]
    with tmpfs(tmp_path / "disk", size="2m") as disk:
        code, err = cli([*tune, "--log-dir", str(disk)], capsys)
        assert code == 1
        one_line(err, "error: cannot write ", str(disk / "tune"), "[Errno 28] No space left on device")
        subprocess.run(["mount", "-o", "remount,size=300m", str(disk)], check=True)
        code, err = cli([*tune, "--log-dir", str(disk)], capsys)
        assert code == 0, err
        assert (disk / "tune" / "TMaze_v0_ppo_mlp" / "best.yaml").is_file()


def test_evaluate_plot_and_report_on_read_only_and_full_disks(finished, tmp_path, capsys):
    with tmpfs(tmp_path / "disk") as disk:
        run = disk / RUN
        shutil.copytree(finished, run)
        remount(disk, read_only=True)
        rows = [  # (argv, status, named): the user's --out or --record is a bad input, the run's own folder a fault
            (["evaluate", str(run)], 1, f"cannot write {str(run)!r}: [Errno 30] Read-only file system"),
            (["evaluate", str(finished), "--record", str(disk / "x.gif")], 2,
             f"--record {str(disk / 'x.gif')!r}: cannot write in {str(disk)!r}: [Errno 30] Read-only file system"),
            (["plot", str(run), "--out", str(disk / "c.png")], 2,
             f"--out {str(disk / 'c.png')!r}: cannot write in {str(disk)!r}: [Errno 30] Read-only file system"),
            (["report", str(disk), "--reps", "20"], 1, "[Errno 30] Read-only file system"),
            (["report", str(finished.parent), "--out", str(disk / "r")], 2,
             f"--out {str(disk / 'r')!r}: cannot write in {str(disk)!r}: [Errno 30] Read-only file system"),
        ]
        for argv, status, named in rows:
            code, err = cli(argv, capsys)
            assert code == status, argv
            one_line(err, named)
        remount(disk, read_only=False)
        filler = fill(disk, leave=0)
        for argv, named in ((["plot", str(run), "--out", str(disk / "c.png"), "--reps", "20"], f"{disk}/c.png'"),
                            (["report", str(disk), "--reps", "20"], f"'{disk}/"),
                            (["report", str(disk), "--reps", "20", "--out", str(disk / "r")], f"'{disk}/r/")):
            code, err = cli(argv, capsys)
            assert code == 1, argv
            one_line(err, "error: cannot write ", named, ": [Errno 28] No space left on device")
            assert not temporary_files(disk)
        assert not (disk / "r").exists()  # the report's own --out folder goes again when nothing fits in it
        filler.unlink()


@pytest.mark.parametrize("command", [[*TINY], TINY_LM])
def test_a_new_run_on_a_full_disk_names_its_lock_and_leaves_no_run_directory_behind(command, tmp_path, capsys):
    log_dir = [f"log_dir={tmp_path / 'disk' / 'runs'}"] if command[0] == "lm" else ["--log-dir",
                                                                                    str(tmp_path / "disk" / "runs")]
    with tmpfs(tmp_path / "disk", size="100m") as disk:
        (disk / "runs").mkdir()
        filler = fill(disk, leave=0)
        code, err = cli([*command, *log_dir], capsys)
        assert code == 1
        one_line(err, f"error: cannot write '{disk / 'runs'}/", "/run.lock': [Errno 28] No space left on device")
        assert not any((disk / "runs").iterdir())
        filler.unlink()
        code, err = cli([*command, *log_dir], capsys)
        assert code == 0, err


LEFT_NOTHING = {  # each command with its output in `{out}`, a folder the command has to make, two deep
    "train": [*TINY, "--log-dir", "{out}"],
    "seed study": [*TINY, "--seed", "0", "1", "--study", "s", "--log-dir", "{out}"],
    "tune": ["tune", "--env", "TMaze-v0", "--env-kwargs", "length=3", "--backbone", "mlp", "-n", "64", "--eval-freq",
             "32", "--n-eval-episodes", "2", "--trials", "1", "--tune-seeds", "1", "--threads", "1", "-p",
             "ppo.n_steps=16", "ppo.batch_size=32", "--log-dir", "{out}"],
    "lm train": [*TINY_LM, "log_dir={out}"],
    "plot": ["plot", "{finished}", "--out", "{out}/curves.png", "--reps", "20"],
    "report": ["report", "{finished_parent}", "--out", "{out}", "--reps", "20"],
    "evaluate --record": ["evaluate", "{finished}", "--record", "{out}/episode.gif", "--episodes", "1"],
}


@pytest.mark.parametrize("command", list(LEFT_NOTHING))
def test_a_command_that_fails_on_a_full_disk_leaves_no_folder_it_made(command, finished, tmp_path, capsys):
    with tmpfs(tmp_path / "disk", size="1m") as disk:
        filler = fill(disk, leave=0)
        out = disk / "made" / "here"
        argv = [a.format(out=out, finished=finished, finished_parent=finished.parent) for a in LEFT_NOTHING[command]]
        code, err = cli(argv, capsys)
        assert code in (1, 2), err
        one_line(err, "[Errno 28] No space left on device")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"], list(disk.rglob("*"))
        filler.unlink()


def test_an_atomic_write_that_fails_keeps_the_old_file_names_the_real_one_and_leaves_no_temporary(tmp_path,
                                                                                                   monkeypatch):
    path = tmp_path / "summary.json"
    atomic.write_atomic(path, "old")
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space")))
    with pytest.raises(atomic.WriteError) as raised:
        atomic.write_atomic(path, "new")
    assert str(raised.value) == f"cannot write {str(path)!r}: [Errno 28] No space"
    assert path.read_text() == "old" and not temporary_files(tmp_path)
    monkeypatch.undo()
    atomic.write_new(tmp_path / "new.json", "{}")
    with pytest.raises(FileExistsError):
        atomic.write_new(tmp_path / "new.json", "[]")
    assert (tmp_path / "new.json").read_text() == "{}" and not temporary_files(tmp_path)


# ---- signals


def _signal_at(moment: str, signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send ``signum`` to this process once, at ``moment`` of the run (the handler raises where it lands)."""
    sent = []

    def send() -> None:
        if not sent:
            sent.append(signum)
            os.kill(os.getpid(), signum)

    def wrap(owner: object, name: str, before: bool, when: Callable[..., bool] = lambda *a, **k: True) -> None:
        original = getattr(owner, name)

        def wrapped(*args: object, **kwargs: object) -> object:
            if before and when(*args, **kwargs):
                send()
            result = original(*args, **kwargs)
            if not before and when(*args, **kwargs):
                send()
            return result

        monkeypatch.setattr(owner, name, wrapped)

    if moment == "rollout":
        wrap(evaluation.RunCallback, "_on_step", before=True, when=lambda self: self.num_timesteps >= 16)
    elif moment == "update":
        from agents import ALGOS

        wrap(ALGOS["ppo"], "train", before=True)
    elif moment == "evaluation":
        wrap(evaluation, "evaluate", before=False)
    elif moment == "inside a checkpoint save":  # torch's zip writer raises its own error as it cleans up
        save = BaseAlgorithm.save

        def breaking(self: BaseAlgorithm, path: str, *args: object, **kwargs: object) -> None:
            if sent or ".model_" not in Path(path).name:
                return save(self, path, *args, **kwargs)
            try:
                send()
                time.sleep(1)
            finally:
                raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 8768 vs 8592")

        monkeypatch.setattr(BaseAlgorithm, "save", breaking)
    else:  # the tmp file is whole, not yet renamed
        wrap(BaseAlgorithm, "save", before=False, when=lambda self, path, *a, **k: (  # `..model.<write>.tmp...`
            ".model_" if moment == "checkpoint" else ".model.") in Path(path).name)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_what_an_interrupted_save_raises_on_its_way_out_still_ends_with_the_signals_status(signum, capsys):
    """A signal inside a library's write (torch.save's zip writer) can surface as that library's own error
    (`RuntimeError: unexpected pos`) raised while it cleans up: the command still ends with 130 or 143 and one line,
    no traceback."""

    def saving(argv: list[str]) -> int:
        advise_on_signal("rerun it")
        try:
            os.kill(os.getpid(), signum)
            time.sleep(1)
        finally:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 8768 vs 8592")

    assert run_command(saving, []) == 128 + signum
    one_line(capsys.readouterr().err, f"{'SIGINT' if signum == signal.SIGINT else 'SIGTERM'}); rerun it")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["rollout", "update", "evaluation", "inside a checkpoint save", "checkpoint",
                                    "final save"])
def test_a_signal_at_any_moment_of_training_exits_130_or_143_and_the_run_resumes(moment, signum, tmp_path, capsys,
                                                                                   monkeypatch):
    log_dir = tmp_path / "runs"
    _signal_at(moment, signum, monkeypatch)
    code, err = cli([*TINY, "--log-dir", str(log_dir)], capsys)
    word = "interrupted (SIGINT)" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert code == 128 + signum
    one_line(err, f"{word}; rerun the same command with --resume to continue")
    assert not temporary_files(log_dir)
    assert not (log_dir / RUN / "summary.json").exists()
    monkeypatch.undo()
    resumes(log_dir, capsys)


def test_a_signal_a_library_swallowed_still_ends_the_command_with_its_status(capsys):
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a process started in the background by a shell

    def swallowing(argv: list[str], advice: str = "rerun it") -> int:
        if advice:
            advise_on_signal(advice)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # as a library's ``except BaseException`` would
        return 0

    assert run_command(swallowing, []) == 130
    one_line(capsys.readouterr().err, "interrupted (SIGINT); rerun it")
    advise_on_signal("outside a command: no effect")
    assert run_command(lambda argv: swallowing(argv, advice=""), []) == 130  # the advice ended with its command
    assert capsys.readouterr().err.strip() == "interrupted (SIGINT)"
    with signals_raised() as received:
        assert isinstance(received, Received) and received.signum is None
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_real_process_signalled_while_it_trains_exits_130_or_143_and_resumes(signum, tmp_path, capsys):
    """Through the real command line, the signal sent from outside once the first checkpoint exists."""
    log_dir = tmp_path / "runs"
    command = [sys.executable, str(REPO / "train_rl.py"), *TINY, "--log-dir", str(log_dir), "-n", "100000"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    deadline = time.monotonic() + 120
    while not list((log_dir / RUN / "checkpoints").glob("model_*_steps.zip")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 128 + signum
    one_line(err, "; rerun the same command with --resume to continue")
    assert not temporary_files(log_dir)
    code, err = cli([*TINY, "--log-dir", str(log_dir), "--resume"], capsys)  # -n 64: ends at its newest checkpoint
    assert code == 0, err
    assert (log_dir / RUN / "summary.json").exists()


def test_a_writer_that_fails_in_its_own_words_on_a_full_disk_is_named_as_a_write_fault(tmp_path, monkeypatch):
    """torch.save reports a full disk as `RuntimeError: unexpected pos`: `atomic_path` probes the folder and raises
    the machine's errno naming the file; when the folder takes a write, the writer's own error stands."""
    import envs.atomic as atomic

    def failing(tmp: Path) -> None:
        tmp.write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 15168 vs 15062")

    target = tmp_path / "lm_10.pt"
    with pytest.raises(RuntimeError, match="unexpected pos"), atomic.atomic_path(target) as tmp:
        failing(tmp)
    monkeypatch.setattr(atomic, "_probe", lambda folder: OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(atomic.WriteError) as raised, atomic.atomic_path(target) as tmp:
        failing(tmp)
    assert str(raised.value) == f"cannot write {str(target)!r}: [Errno 28] No space left on device"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("command", "where", "advice"), [
    (["tune", "--env", "TMaze-v0", "--env-kwargs", "length=3", "-n", "64", "--trials", "1", "--log-dir", "OUT"],
     ("experiments.studies.tune", "run_workers"), "rerun the same command to resume the search"),
    (["lm", "train", "-p", "data=copy", "log_dir=OUT", "copy_tokens=2000"],
     ("lm.workbench", "train_lm"), "rerun the same command with --resume to continue"),
], ids=["tune", "lm train"])
def test_every_resumable_command_says_how_to_resume_when_a_signal_ends_it(command, where, advice, tmp_path, capsys,
                                                                         monkeypatch):
    def interrupted(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)

    monkeypatch.setattr(importlib.import_module(where[0]), where[1], interrupted)
    code, err = cli([word.replace("OUT", str(tmp_path)) for word in command], capsys)
    assert code == 143
    one_line(err, f"terminated (SIGTERM); {advice}")


def test_a_model_save_on_a_full_disk_keeps_the_model_it_would_replace(tmp_path):
    """``model.save`` over an earlier model, on a disk too full for the new one: ``WriteError`` naming the file, and
    the earlier model still loads (SB3's own save truncates the file first and loses both)."""
    from agents import MemoryPPO

    small = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, policy_kwargs={"backbone": "gru"})
    large = MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16,
                      policy_kwargs={"backbone": "gru", "backbone_kwargs": {"hidden_size": 512}})
    with tmpfs(tmp_path / "disk") as disk:
        small.save(disk / "model")
        kept = (disk / "model.zip").read_bytes()
        filler = fill(disk, leave=0)
        with pytest.raises(atomic.WriteError, match=f"cannot write '{disk / 'model.zip'}': .Errno 28."):
            large.save(disk / "model")
        assert (disk / "model.zip").read_bytes() == kept and not temporary_files(disk)
        with pytest.raises(atomic.WriteError, match="Errno 28"):
            large.save(disk / "new" / "folder" / "model")
        assert not (disk / "new").exists()  # the folders the save made go with it
        from experiments.run_dir import RunDirectory

        run = RunDirectory(disk / "run")
        with pytest.raises(atomic.WriteError, match=f"^cannot write '{run / 'model.zip'}': .Errno 28."):
            run.save_model(large)  # the run's model, not the temporary name the learner's own save writes to
        assert not temporary_files(disk)
        filler.unlink()
        loaded = MemoryPPO.load(disk / "model.zip")
        assert loaded.policy_kwargs["backbone_kwargs"] == small.policy_kwargs["backbone_kwargs"]


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_evaluate_recording_to_a_full_disk_ends_with_one_line_and_leaves_no_video_and_no_record(suffix, finished,
                                                                                                tmp_path, capfd,
                                                                                                monkeypatch):
    """ffmpeg's broken pipe (or its exit status) and Pillow's failed flush are reported as the disk's errno, in one
    line: nothing of ffmpeg's own log, no traceback, no `Exception ignored in __del__`; no video, no temporary file,
    and no `evaluate_*.json` claiming an evaluation whose video failed."""
    import gc

    run = tmp_path / RUN
    shutil.copytree(finished, run)
    before = sorted(path.name for path in run.iterdir())
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with tmpfs(tmp_path / "disk", size="1m") as disk:
        filler = fill(disk, leave=0)
        video = disk / f"v{suffix}"
        code = train_rl.main(["evaluate", str(run), "--episodes", "2", "--record", str(video)])
        gc.collect()  # a writer's file left open would report its failed flush now
        err = capfd.readouterr().err
        assert code == 1 and not unraisable, err
        one_line(err, f"error: cannot write {str(video)!r}: [Errno 28] No space left on device")
        assert sorted(path.name for path in disk.iterdir()) == ["filler"]
        assert sorted(path.name for path in run.iterdir()) == before
        filler.unlink()


def test_a_best_model_that_does_not_fit_keeps_the_record_of_the_model_kept(tmp_path):
    """`best_model.json` is written only once `best_model.zip` is whole: a full disk that takes the small record but
    not the model leaves the pair as it was, each naming the same evaluation."""
    import json

    from experiments.run_dir import RunDirectory

    class Model:
        def __init__(self, size: int) -> None:
            self.size = size

        def save(self, path: Path) -> None:
            Path(path).write_bytes(bytes(self.size))

    with tmpfs(tmp_path / "disk", size="4m") as disk:
        run = RunDirectory(disk / "run")
        run.path.mkdir()
        run.save_best(Model(1000), 128, -1.0)
        filler = fill(disk, leave=256 << 10)  # room for the record, not for the model
        with pytest.raises(atomic.WriteError, match=r"\[Errno 28\]"):
            run.save_best(Model(2 << 20), 256, 1.0)
        assert (run / "best_model.zip").stat().st_size == 1000
        assert json.loads((run / "best_model.json").read_text()) == {"timesteps": 128, "mean_return": -1.0}
        assert not temporary_files(disk)
        filler.unlink()
        run.save_best(Model(2 << 20), 256, 1.0)
        assert (run / "best_model.zip").stat().st_size == 2 << 20
        assert json.loads((run / "best_model.json").read_text()) == {"timesteps": 256, "mean_return": 1.0}


def test_an_ffmpeg_failure_the_disk_does_not_explain_names_the_video_and_ffmpegs_last_error(tmp_path, monkeypatch):
    """ffmpeg's exit status is checked: a failure with room on the disk is a `WriteError` (EIO) naming the video and
    ffmpeg's last error line, and no file is left."""
    import numpy as np

    from experiments import video

    def failing(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(command, 1, b"", b"[libx264 @ 0x1] broken\nConversion failed!\n")

    monkeypatch.setattr(video.subprocess, "run", failing)
    path = tmp_path / "v.mp4"
    with pytest.raises(atomic.WriteError) as raised:
        video.write_video([np.zeros((4, 4, 3), dtype=np.uint8)], path, fps=4)
    assert str(raised.value) == (f"cannot write {str(path)!r}: [Errno {errno.EIO}] ffmpeg exited with status 1: "
                                 "Conversion failed!")
    assert list(tmp_path.iterdir()) == []


def test_a_best_model_whose_rename_fails_keeps_the_record_of_the_model_kept(tmp_path, monkeypatch):
    """The record is written between the model's temporary file and its rename; a rename that fails puts the record
    of the model kept back."""
    import json

    from experiments.run_dir import RunDirectory

    class Model:
        def save(self, path: Path) -> None:
            Path(path).write_bytes(b"model")

    run = RunDirectory(tmp_path)
    run.save_best(Model(), 128, -1.0)
    original = atomic.os.replace

    def failing(source: object, target: object) -> None:
        if Path(str(target)).name == "best_model.zip":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        original(source, target)

    monkeypatch.setattr(atomic.os, "replace", failing)
    with pytest.raises(atomic.WriteError, match=r"best_model.zip'.*\[Errno 28\]"):
        run.save_best(Model(), 256, 1.0)
    assert json.loads((tmp_path / "best_model.json").read_text()) == {"timesteps": 128, "mean_return": -1.0}
    assert not temporary_files(tmp_path)


def test_every_folder_a_command_makes_is_made_where_a_failure_removes_it_again():
    """Folders are made through `envs.atomic` alone (`made_folders` removes those a failed command made,
    `new_directory` claims a command's own output folder): a bare ``mkdir`` leaves empty folders behind a full
    disk."""
    bare = [f"{path.relative_to(REPO)}:{number}" for package in ("agents", "envs", "experiments", "lm", "policies")
            for path in sorted((REPO / package).rglob("*.py")) if path.name != "atomic.py" or path.parent.name != "envs"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if ".mkdir(" in line or "makedirs(" in line]
    assert not bare, bare


def test_an_error_a_thread_keeps_for_its_owner_ends_the_command_once(capsys, monkeypatch) -> None:
    """tensorboard's event writer keeps a full disk's error for its owner, which raises it again: one line, and no
    traceback of the thread beside it (what `threading.excepthook` would print)."""
    printed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))

    class Keeper(threading.Thread):
        exception: OSError | None = None

        def run(self) -> None:
            self.exception = OSError(28, "No space left on device")
            raise self.exception

    def command(argv: list[str]) -> int:
        keeper = Keeper()
        keeper.start()
        keeper.join()
        raise WriteError(28, "No space left on device", "events")

    assert run_command(command, []) == 1
    assert capsys.readouterr().err == "error: cannot write 'events': [Errno 28] No space left on device\n"
    assert printed == []
