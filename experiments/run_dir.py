"""The directory of one run, and the one object that owns it: `RunDirectory`.

A run lives in `{log_dir}/{env}__{algo}-{backbone}__{seed}/`:

- `config.yaml`: the resolved configuration, every option of the learner and the backbone included;
- `run.lock`: held (`flock`) by the one process writing the run, with its PID and host;
- `evaluations.csv`: one row per evaluation (`EVAL_COLUMNS`);
- `checkpoints/model_<steps>_steps.zip` and `progress.json` (training seconds at each kept checkpoint);
- `best_model.zip` and `best_model.json` (the best evaluation's step and mean return);
- `model.zip` (the final model) and `summary.json`;
- `MemoryPPO_1/` (the learner's name): tensorboard events;
- `status.json`: what a study's worker writes around the run (`experiments.studies.runs`).

Every file is written whole or not at all (`envs.atomic`); each saved model holds its run's settings
(`experiments.run_identity`). A run resumed from step `s` first drops every record after `s`
(`RunDirectory.rewind`).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import math
import os
import re
import shutil
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import yaml

from envs.atomic import atomic_path, made_folders, write_atomic, write_error
from envs.rules import ConfigError, one_line, shown
from experiments.config import RunConfig, load_yaml
from experiments.run_identity import Record, add_record, read_record, refuse_differences
from experiments.strict_yaml import described
from experiments.strict_yaml import load as load_yaml_text

CONFIG_FILE, SUMMARY_FILE, MODEL_FILE = "config.yaml", "summary.json", "model.zip"
EVALUATIONS_FILE, PROGRESS_FILE, STATUS_FILE = "evaluations.csv", "progress.json", "status.json"
LOCK_FILE = "run.lock"
"""held (``flock``) by the one process writing the run; holds its PID and host"""
BEST_MODEL, BEST_RECORD = "best_model.zip", "best_model.json"
"""the model of the best evaluation, and that evaluation's step and mean return"""
CHECKPOINTS, CHECKPOINT_PREFIX, CHECKPOINT_SUFFIX = "checkpoints", "model_", "_steps.zip"
EVENT_FILES = "events.out.tfevents.*"
EVAL_COLUMNS = ["timesteps", "mean_return", "std_return", "mean_length", "success_rate", "wall_seconds",
                "stochastic_mean_return", "stochastic_success_rate"]


STUDY_RECORD, STUDY_LOCK = "study.yaml", ".lock"
"""a study directory's record (its grid, runs and commands) and the lock of the one process running it"""
TUNE_RECORD, TUNE_FOLDER = "search.json", "tune"
"""a tune study's record of what it searches, in `{log_dir}/tune/{name}/`"""
TRIAL_FOLDER = re.compile(r"trial_\d+")
"""the folder of a tune trial's runs inside its tune study directory"""


def kind_of(folder: Path) -> tuple[str, str] | None:
    """`(kind, marker)` when `folder` is a run directory (`run.lock`; a study's planned run: `config.yaml` with
    `status.json`), a study directory (`study.yaml` with its `.lock`) or a tune study directory (`search.json`
    in a folder of `tune/`): the marker is the file that shows it; else `None`."""
    def has(*names: str) -> bool:
        try:
            return all((folder / name).is_file() for name in names)
        except OSError:  # a folder that cannot be read is nobody's we can tell
            return False

    if has(LOCK_FILE) or has(CONFIG_FILE, STATUS_FILE):
        return "run directory", LOCK_FILE if has(LOCK_FILE) else CONFIG_FILE
    if has(STUDY_RECORD, STUDY_LOCK):
        return "study directory", STUDY_RECORD
    if folder.parent.name == TUNE_FOLDER and has(TUNE_RECORD):
        return "tune study directory", TUNE_RECORD
    return None


def owners_of(path: str | Path) -> list[tuple[Path, str, str]]:
    """Every run, study or tune study directory at or above `path` (`kind_of`), nearest first, as
    `(folder, kind, marker)`."""
    path = Path(os.path.abspath(path))
    return [(folder, *kind) for folder in (path, *path.parents) if (kind := kind_of(folder)) is not None]


TUNING: ContextVar[Path | None] = ContextVar("TUNING", default=None)
"""the tune study directory whose trial this process (or thread) trains now, set by the tune's trial runner"""


def belongs(path: Path, owner: Path, kind: str) -> bool:
    """Whether the run directory `path`, below `owner`, is one of its runs: listed in the study's `study.yaml`,
    or in a trial folder of the tune study while that study's trial runner trains it (`TUNING`)."""
    relative = path.relative_to(owner)
    if kind == "tune study directory":
        tuning = TUNING.get()
        return bool(TRIAL_FOLDER.fullmatch(relative.parts[0])) and tuning is not None and \
            os.path.realpath(tuning) == os.path.realpath(owner)
    try:
        record = load_yaml_text((owner / STUDY_RECORD).read_text()) or {}
    except (ConfigError, OSError, ValueError):
        return False
    return isinstance(record, dict) and relative.as_posix() in (record.get("runs") or [])


def check_owner(what: str, path: str | Path, option: str, value: Any, name_option: str | None = None) -> None:
    """Refuse (`ConfigError`, one line) to make the `what` (`run directory`, `study directory`, `tune study
    directory`) `path` inside a run, study or tune study directory it does not belong to, at any depth, or where
    another kind of directory is: their files would mix, and reports would count the wrong runs. `path` being a
    directory of its own kind is its own (a resume); a run belongs to the study that lists it and to the tune
    study whose trial folder holds it while that tune trains it (`TUNING`). `option` and `value` place it
    (`--log-dir`); `name_option` names it, when a name of its own (`--study`) makes it another kind of directory.
    Changes nothing."""
    path = Path(os.path.abspath(path))
    for owner, kind, marker in owners_of(path):
        if owner == path:
            if kind == what:
                continue
            key, shown_value = (name_option, path.name) if name_option else (option, value)
            raise ConfigError(f"{key}={str(shown_value)!r}: the {what} {str(path)!r} is the {kind} {str(owner)!r} "
                              f"({marker}); choose another {key}")
        if what == "run directory" and kind != "run directory" and belongs(path, owner, kind):
            continue
        raise ConfigError(f"{option}={str(value)!r}: the {what} {str(path)!r} would be inside the {kind} "
                          f"{str(owner)!r} ({marker}), which it does not belong to; choose a {option} outside it")


class RunBusyError(RuntimeError):
    """Another process holds the run directory's lock."""


def notify(message: str) -> None:
    """Tell the user what a run does with its directory (stderr, so that it reaches a study's terminal too)."""
    print(message, file=sys.stderr, flush=True)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`; `None` when there is none, or the file holds no JSON object (`json_problem`)."""
    try:
        value = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def json_problem(path: Path) -> str | None:
    """Why the file at `path`, where there is one, holds no JSON object (`read_json` reads it as none); else `None`."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"{path.name} is not JSON ({one_line(error)})"
    return None if isinstance(value, dict) else f"{path.name} holds a {type(value).__name__}, not a JSON object"


SUMMARY_FIELDS = {"env_steps": ((int,), "an integer"), "final_mean_return": ((int, float), "a number"),
                  "final_std_return": ((int, float), "a number"),
                  "final_success_rate": ((int, float, type(None)), "a number or null")}
"""the fields of a training run's `summary.json` that reports and studies read: the JSON types each takes, named"""


def summary_problem(summary: dict[str, Any]) -> str | None:
    """What a training run's summary lacks or holds of another type (`SUMMARY_FIELDS`), or a success rate outside
    [0, 1], else `None`."""
    absent = [key for key in SUMMARY_FIELDS if key not in summary]
    if absent:
        return "has no " + ", ".join(absent)
    wrong = [f"{key}={summary[key]!r}, not {name}" for key, (kinds, name) in SUMMARY_FIELDS.items()
             if isinstance(summary[key], bool) or not isinstance(summary[key], kinds)]
    rate = summary["final_success_rate"]
    if not wrong and rate is not None and not 0 <= rate <= 1:  # a return may diverge; a rate is a share, or NaN
        wrong = [f"final_success_rate={rate!r}, not a rate in [0, 1]"]
    return "holds " + "; ".join(wrong) if wrong else None


def checkpoints(directory: Path, prefix: str = CHECKPOINT_PREFIX,
                suffix: str = CHECKPOINT_SUFFIX) -> list[tuple[Path, int]]:
    """Every checkpoint `{prefix}{steps}{suffix}` in `directory`, as `(path, steps)`, fewest steps first."""
    found = []
    for path in directory.glob(f"{prefix}*{suffix}"):
        steps = path.name.removeprefix(prefix).removesuffix(suffix)
        if steps.isdigit():
            found.append((int(steps), path))
    return [(path, steps) for steps, path in sorted(found)]


def best_checkpoint(found: list[tuple[Path, int]], rows: list[dict[str, str]]) -> tuple[Path, int] | None:
    """The checkpoint of `found` with the highest mean return (the earliest of equals), each scored by the last
    evaluation at or before its step; `None` without evaluations."""
    scored = sorted((int(float(r["timesteps"])), float(r["mean_return"])) for r in rows)
    best, best_score = None, -math.inf
    for path, steps in found:
        before = [score for step, score in scored if step <= steps]
        if before and before[-1] > best_score:
            best, best_score = (path, steps), before[-1]
    return best


class EvalLog:
    """`evaluations.csv`: one row per evaluation, the file rewritten whole (atomically) with each new row."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def columns(self) -> list[str]:
        """The file's own header, else `EVAL_COLUMNS`."""
        if not self.path.exists():
            return EVAL_COLUMNS
        with self.path.open(newline="") as f:
            return next(csv.reader(f), EVAL_COLUMNS)

    def rows(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with self.path.open(newline="") as f:
            return list(csv.DictReader(f))

    def append(self, row: dict[str, Any]) -> None:
        self._write([*self.rows(), row])

    def truncate_after(self, timesteps: int) -> None:
        """Drop the rows after `timesteps`."""
        if self.path.exists():
            self._write([r for r in self.rows() if int(float(r["timesteps"])) <= timesteps])

    def _write(self, rows: list[dict[str, Any]]) -> None:
        text = io.StringIO()
        writer = csv.DictWriter(text, self.columns(), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        write_atomic(self.path, text.getvalue())


def read_records(path: Path) -> list[bytes]:
    """The complete records of a TFRecord file (length, its CRC, data, its CRC); a record cut short ends the list."""
    data = path.read_bytes()
    records, offset = [], 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        end = offset + 12 + length + 4
        if end > len(data):
            break
        records.append(data[offset + 12:offset + 12 + length])
        offset = end
    return records


def rewind_tensorboard(directory: Path, steps: int) -> None:
    """Keep only the events at `step ≤ steps` in every tensorboard event file in `directory` or below it (SB3 logs
    in a folder of its own, `lm train` in the run directory). A file left without a summary is removed, and so is
    a folder below `directory` left empty (SB3 then reuses its name)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    emptied = set()
    for path in sorted(directory.rglob(EVENT_FILES)):
        records = read_records(path)
        events = [(record, Event.FromString(record)) for record in records]
        kept = [(record, event) for record, event in events if not event.HasField("summary") or event.step <= steps]
        if len(kept) == len(records) and path.stat().st_size == sum(len(r) + 16 for r in records):
            continue  # nothing after ``steps``, and no record cut short
        if not any(event.HasField("summary") for _, event in kept):
            path.unlink()
            emptied.add(path.parent)
            continue
        with atomic_path(path) as tmp, tmp.open("wb") as handle:
            writer = RecordWriter(handle)
            for record, _ in kept:
                writer.write(record)
            writer.flush()
    for folder in emptied - {directory}:
        if not any(folder.iterdir()):
            folder.rmdir()


def _busy(handle: Any, directory: Path) -> RunBusyError | None:
    """`None` once this process holds the lock on `handle`, else the error naming the holder."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().split()
        who = (f"process {holder[0]} on {holder[1]}" if len(holder) == 2
               else "another process (starting: its PID is not written yet)")
        return RunBusyError(f"run directory {str(directory)!r} is being written by {who}; wait for it to end, "
                            "or stop it and rerun with --resume")
    return None


class RunDirectory:
    """One run's directory: its files, its one writer's lock, and every write to it.

    `checkpoint_prefix` and `checkpoint_suffix` name its checkpoints (`model_<steps>_steps.zip`; the language
    model workbench's are `lm_<step>.pt`); `log_dir_key` is how its command's messages name the folder it is in
    (`--log-dir`; `lm train`'s `log_dir`); `own_reader` is the command that reads its runs (`reader`).
    """

    def __init__(self, path: str | Path, checkpoint_prefix: str = CHECKPOINT_PREFIX,
                 checkpoint_suffix: str = CHECKPOINT_SUFFIX, log_dir_key: str = "--log-dir",
                 own_reader: str = "evaluate") -> None:
        self.path = Path(path)
        self.checkpoint_prefix, self.checkpoint_suffix = checkpoint_prefix, checkpoint_suffix
        self.log_dir_key, self.own_reader = log_dir_key, own_reader
        self.evaluations = EvalLog(self.path / EVALUATIONS_FILE)

    @classmethod
    def of(cls, config: RunConfig) -> RunDirectory:
        """The directory of the run `config` describes: `{log_dir}/{run_name}`."""
        return cls(Path(config.log_dir) / config.run_name())

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    # -- what it holds --------------------------------------------------------------------------------------------

    def holds_run(self) -> bool:
        """Whether it holds (part of) a run: anything but its lock and a study's status file."""
        return self.path.is_dir() and any(p.name not in (LOCK_FILE, STATUS_FILE) for p in self.path.iterdir())

    def config(self) -> dict[str, Any] | None:
        """`config.yaml` as written; `None` when there is none; `ConfigError` naming it when it is no YAML."""
        path = self / CONFIG_FILE
        if not path.exists():
            return None
        try:
            return load_yaml_text(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML{described(error)}") from None

    def reader(self) -> str | None:
        """The command that reads the run here: `evaluate` for a training run (its `config.yaml` names an env),
        `lm eval` for a language-model run (it names its data); `None` without a readable `config.yaml`."""
        try:
            config = self.config()
        except (ConfigError, OSError, ValueError):
            return None
        if not isinstance(config, dict):
            return None
        return "evaluate" if "env" in config else "lm eval" if "data" in config else None

    def summary(self) -> dict[str, Any] | None:
        return read_json(self / SUMMARY_FILE)

    def progress(self) -> dict[str, Any] | None:
        return read_json(self / PROGRESS_FILE)

    def checkpoints(self) -> list[tuple[Path, int]]:
        """Every checkpoint as `(path, steps)`, fewest steps first."""
        return checkpoints(self / CHECKPOINTS, self.checkpoint_prefix, self.checkpoint_suffix)

    def latest_checkpoint(self) -> tuple[Path, int] | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def checkpoint_walls(self) -> dict[int, float]:
        """Training wall-clock seconds at each kept checkpoint (steps → seconds), from `progress.json`."""
        progress = self.progress() or {}
        walls = {int(k): float(v) for k, v in (progress.get("checkpoints") or {}).items()}
        if progress.get("timesteps") is not None:
            walls.setdefault(int(progress["timesteps"]), float(progress["wall_seconds"]))
        return walls

    # -- one writer -----------------------------------------------------------------------------------------------

    def check_is_directory(self) -> None:
        """Refuse (`ConfigError` naming the path) a run directory's path that holds something else, a file: no run
        can be written (or resumed) there, and it is not this command's to remove."""
        if os.path.lexists(self.path) and not self.path.is_dir():
            what = "a file" if self.path.is_file() else "not a directory"
            raise ConfigError(f"run directory {str(self.path)!r} is {what}; expected a directory (or nothing) there: "
                              f"move the file away, or choose another --seed or {self.log_dir_key}")

    def check_place(self) -> None:
        """Refuse a run directory inside one it does not belong to (`check_owner`, naming `log_dir_key`), one that
        holds files but no run (no `run.lock`: a user's folder), and one that holds a run of another command (a
        language-model run where a training run goes, or the reverse)."""
        check_owner("run directory", self.path, self.log_dir_key, str(self.path.parent))
        if self.holds_run() and kind_of(self.path) is None:
            raise ConfigError(f"run directory {str(self.path)!r} holds files but no run (no {LOCK_FILE}): a run "
                              f"never writes into a folder it did not make; move them away, or choose another "
                              f"{self.log_dir_key} or seed")
        if (reader := self.reader()) not in (None, self.own_reader):
            kinds = {"evaluate": "a training run", "lm eval": "a language-model run"}
            raise ConfigError(f"run directory {str(self.path)!r} holds {kinds[reader]} (`{reader}` reads it), not "
                              f"{kinds[self.own_reader]}; choose another {self.log_dir_key} or seed")

    def check_not_busy(self) -> None:
        """Raise `RunBusyError` when another process holds the lock, and `ConfigError` when the path is no
        directory (`check_is_directory`) or inside a directory it does not belong to (`check_place`); changes no
        file."""
        self.check_is_directory()
        self.check_place()
        try:
            handle = (self / LOCK_FILE).open()
        except FileNotFoundError:
            return
        with handle:
            busy = _busy(handle, self.path)
        if busy is not None:
            raise busy

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory's exclusive lock (`flock` on `run.lock`, which records this process's PID and
        host) while the block runs; the kernel releases it when the process ends, even killed. Raises
        `RunBusyError`, naming the holder, when another process has it, and `ConfigError` when the path is no
        directory (`check_is_directory`)."""
        self.check_is_directory()
        with made_folders(self.path, leftovers=(LOCK_FILE,), kept_on=(RunBusyError,)):  # gone again when the run
            # fails holding no more, unless another process holds the lock
            path = self / LOCK_FILE
            try:
                handle = path.open("a+")
            except OSError as error:
                raise write_error(error, path) from error
            with handle:
                busy = _busy(handle, self.path)
                if busy is not None:
                    raise busy
                try:  # unbuffered: a failed write leaves nothing for `close` to flush again
                    os.ftruncate(handle.fileno(), 0)
                    os.write(handle.fileno(), f"{os.getpid()} {socket.gethostname()}\n".encode())
                except OSError as error:
                    raise write_error(error, path) from error
                yield

    # -- a new run, or a resumed one ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def claimed(self, resume: bool, refuse: Callable[[], None]) -> Iterator[None]:
        """Hold the lock while a run trains here, once its place is checked (`check_place`). A new run (not
        `resume`) calls `refuse` once the lock is held, for a run another process started here meanwhile (refused,
        never removed); a directory this call created is removed again when the run is refused (`ConfigError`)
        before it trains (it holds its lock and `config.yaml` at most), or when a write fails (`OSError`: a full
        disk) before it holds anything but its lock. A run that has trained keeps every file, whatever ends it (an
        env that breaks at a later step)."""
        self.check_place()
        existed = self.path.exists()
        try:
            with self.lock():
                if not resume and self.holds_run():
                    existed = True
                    refuse()
                yield
        except (ConfigError, OSError) as error:
            kept = (LOCK_FILE, STATUS_FILE, CONFIG_FILE) if isinstance(error, ConfigError) else (LOCK_FILE, STATUS_FILE)
            if not existed and self.path.is_dir() and not any(p.name not in kept for p in self.path.iterdir()):
                shutil.rmtree(self.path, ignore_errors=True)
            raise

    def refuse_existing(self, env: str | None = None) -> None:
        """Raise `ConfigError` when the directory already holds a run: a run directory is never reused. A run of
        another env spec than `env` that gives the same folder name (`pkg:Env`, `pkg/Env`) is named as such."""
        if not self.holds_run():
            return
        try:
            config = self.config()
        except (ConfigError, OSError, ValueError):
            config = None
        if env is not None and isinstance(config, dict) and "env" in config and config["env"] != env:
            raise ConfigError(f"run directory {str(self.path)!r} holds a run of env={shown(config['env'])}, whose "
                              f"folder name env={shown(env)} gives too; choose another {self.log_dir_key} (a run "
                              "directory is never overwritten)")
        summary, checkpoint = self.summary(), self.latest_checkpoint()
        what = (f"a finished run ({summary.get('env_steps', '?')} steps)" if summary is not None
                else f"an unfinished run (last checkpoint at step {checkpoint[1]})" if checkpoint is not None
                else "an unfinished run (stopped before its first checkpoint)")
        raise ConfigError(f"run directory {str(self.path)!r} already holds {what}; add --resume to continue it, or "
                          "choose another --seed or --log-dir (a run directory is never overwritten)")

    def finished(self, total_timesteps: int) -> dict[str, Any] | None:
        """The summary, when the run has trained `total_timesteps` or stopped solved; else `None` (also when the
        summary is damaged, `summary_problem`: resuming writes it again)."""
        summary = self.summary()
        if summary is not None and summary_problem(summary) is None and (
                summary["env_steps"] >= total_timesteps or summary.get("stopped_solved")):
            return summary
        return None

    def check_same_run(self, config: RunConfig) -> None:
        """Refuse (`ConfigError` naming the keys) to resume with another configuration than the run's own: the one
        in `config.yaml`, and the one recorded in each checkpoint."""
        path = self / CONFIG_FILE
        if path.exists():
            refuse_differences(config, Record(load_yaml(path)), repr(str(path)))
        for path, _ in reversed(self.checkpoints()):
            record = read_record(path)
            if record is not None:
                refuse_differences(config, record, f"its checkpoint {str(path)!r}")

    def load_newest_checkpoint(self, load: Callable[[Path], Any]) -> tuple[Any, int] | None:
        """`(load(path), steps)` of the newest checkpoint that loads; `None` when there is none.

        A checkpoint that fails to load is named and, once an older one loads, renamed `*.unloadable`. When
        checkpoints exist but none loads: `ConfigError`, nothing changed.
        """
        failures = []
        for path, steps in reversed(self.checkpoints()):
            try:
                model = load(path)
            except Exception as error:  # zipfile, pickle, torch and key errors alike: the file is unusable
                failures.append(path)
                notify(f"checkpoint {str(path)!r} does not load ({type(error).__name__}: {error})")
                continue
            for failed in failures:
                os.replace(failed, failed.with_name(f"{failed.name}.unloadable"))
            if failures:
                notify(f"resuming from {str(path)!r} ({steps} steps), the newest checkpoint that loads; "
                       f"set aside: {', '.join(f'{p.name}.unloadable' for p in failures)}")
            return model, steps
        if failures:
            raise ConfigError(f"--resume: none of the {len(failures)} checkpoints in {str(self / CHECKPOINTS)!r} "
                              "loads; the run directory is left as it is")
        return None

    def checkpoint_note(self) -> str:
        """Where a run that stopped can restart from: its newest checkpoint, or that it has none."""
        latest = self.latest_checkpoint()
        if latest is None:
            return f"no checkpoint was saved before it ({str(self / CHECKPOINTS)!r} holds none)"
        return f"the last checkpoint before it is {str(latest[0])!r} (step {latest[1]})"

    def rewind(self, steps: int) -> float:
        """Drop every record after `steps`, the step a resume continues from; returns the training seconds then.

        `evaluations.csv`, `progress.json` and the tensorboard events keep what is at or before `steps`;
        `summary.json`, `model.zip` and the best model go when they come from after it, and so do the temporary
        files of an interrupted write.
        """
        wall = self.wall_seconds_at(steps) if steps else 0.0
        evaluations_dropped = any(int(float(r["timesteps"])) > steps for r in self.evaluations.rows())
        self.evaluations.truncate_after(steps)
        if steps:
            self.record_progress(steps, wall, {k: v for k, v in self.checkpoint_walls().items() if k <= steps})
        else:
            (self / PROGRESS_FILE).unlink(missing_ok=True)
        rewind_tensorboard(self.path, steps)
        for tmp in [*self.path.glob(".*.tmp*"), *self.path.glob(f"{CHECKPOINTS}/.*.tmp*")]:
            tmp.unlink()
        summary_steps = (self.summary() or {}).get("env_steps")
        if not isinstance(summary_steps, int) or summary_steps > steps:
            for name in (SUMMARY_FILE, MODEL_FILE):
                (self / name).unlink(missing_ok=True)
        best = read_json(self / BEST_RECORD)
        if best["timesteps"] > steps if best is not None else evaluations_dropped:
            for name in (BEST_MODEL, BEST_RECORD):
                (self / name).unlink(missing_ok=True)
        return wall

    def wall_seconds_at(self, steps: int) -> float:
        """Training wall-clock seconds when the checkpoint at `steps` was saved (0 at step 0)."""
        walls = self.checkpoint_walls()
        if steps in walls:
            return float(walls[steps])
        earlier = [float(r["wall_seconds"]) for r in self.evaluations.rows() if int(float(r["timesteps"])) <= steps]
        return earlier[-1] if earlier else 0.0

    # -- writes, each whole or not at all -------------------------------------------------------------------------

    def write(self, name: str, text: str) -> None:
        """Write the file `name` of the directory (`envs.atomic.write_atomic`)."""
        write_atomic(self / name, text)

    def write_config(self, settings: dict[str, Any]) -> None:
        """Write `config.yaml`: `settings`, the run's record (`experiments.run_identity.config_record`)."""
        self.write(CONFIG_FILE, yaml.safe_dump(settings, sort_keys=False))

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write(SUMMARY_FILE, json.dumps(summary, indent=2))

    def save(self, name: str, write: Callable[[Path], None]) -> Path:
        """Write the file `name` (its folder made if needed) as `write(tmp)` writes `tmp`, whole or not at
        all (`envs.atomic.atomic_path`)."""
        path = self / name
        with made_folders(path.parent), atomic_path(path) as tmp:
            write(tmp)
        return path

    def save_model(self, model: Any, name: str = MODEL_FILE, record: dict[str, Any] | None = None) -> Path:
        """`model.save` to `name` whole or not at all, with `record`, the run's settings, inside it."""

        def write(tmp: Path) -> None:
            model.save(tmp)
            if record is not None:
                add_record(tmp, record)

        return self.save(name, write)

    def save_checkpoint(self, model: Any, steps: int, wall_seconds: float, keep: int,
                        record: dict[str, Any] | None = None) -> None:
        """Save the checkpoint of `steps`, prune the older ones to the newest `keep` and the best, and record
        `progress.json`."""
        self.save_model(model, f"{CHECKPOINTS}/{self.checkpoint_prefix}{steps}{self.checkpoint_suffix}", record)
        kept = self.prune_checkpoints(keep)
        walls = {**self.checkpoint_walls(), steps: wall_seconds}
        self.record_progress(steps, wall_seconds, {k: v for k, v in walls.items() if k in kept})

    def prune_checkpoints(self, keep: int) -> list[int]:
        """Delete every checkpoint but the newest `keep` and the best one (`keep` 0: keep all); returns the
        steps of those left."""
        found = self.checkpoints()
        if keep <= 0:
            return [steps for _, steps in found]
        kept = found[-keep:]
        best = best_checkpoint(found, self.evaluations.rows())
        if best is not None and best not in kept:
            kept.insert(0, best)
        for path, steps in found:
            if (path, steps) not in kept:
                path.unlink()
        return [steps for _, steps in kept]

    def record_progress(self, steps: int, wall_seconds: float, checkpoint_walls: dict[int, float]) -> None:
        """Write `progress.json`: the newest checkpoint's steps, the training seconds then, and those of every
        kept checkpoint."""
        record = {"timesteps": steps, "wall_seconds": wall_seconds,
                  "checkpoints": {str(k): v for k, v in sorted(checkpoint_walls.items())}}
        self.write(PROGRESS_FILE, json.dumps(record))

    def best_return(self) -> float:
        """The mean return of the evaluation `best_model.zip` holds; -inf when there is none."""
        best = read_json(self / BEST_RECORD)
        if best is not None:
            return float(best["mean_return"])
        if (self / BEST_MODEL).exists():
            return max((float(r["mean_return"]) for r in self.evaluations.rows()), default=-math.inf)
        return -math.inf

    def save_best(self, model: Any, steps: int, mean_return: float, record: dict[str, Any] | None = None) -> None:
        """Save `best_model.zip` and its evaluation (`best_model.json`) so that the two agree: the model is written
        whole to its temporary file, then the record, then the model is renamed into place. A failed write (a full
        disk) leaves both as they were; a kill before the rename leaves the record newer than the model, so a
        resume from an earlier step drops both (`rewind`)."""
        def identity() -> tuple[int, int] | None:  # of the file at best_model.zip: a rename over it changes it
            with contextlib.suppress(FileNotFoundError):
                stat = os.stat(self / BEST_MODEL)
                return stat.st_dev, stat.st_ino
            return None

        previous = (self / BEST_RECORD).read_text() if (self / BEST_RECORD).is_file() else None
        kept = identity()
        recorded = []

        def write(tmp: Path) -> None:
            model.save(tmp)
            if record is not None:
                add_record(tmp, record)
            with tmp.open("rb+") as handle:  # on disk before the record names it
                os.fsync(handle.fileno())
            self.write(BEST_RECORD, json.dumps({"timesteps": steps, "mean_return": mean_return}))
            recorded.append(True)

        try:
            self.save(BEST_MODEL, write)
        except Exception:
            if recorded and identity() == kept:  # not renamed: the record of the model kept
                with contextlib.suppress(OSError):
                    if previous is None:
                        (self / BEST_RECORD).unlink(missing_ok=True)
                    else:
                        self.write(BEST_RECORD, previous)
            raise
