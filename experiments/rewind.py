"""Rewind a run directory to the step it resumes from, so that its history stays honest.

A run killed at step ``k`` resumes from its newest checkpoint that loads, at step ``s ≤ k`` (0 when
it has none): the training from ``s`` to ``k`` is redone, so every record of it is dropped first.

- ``evaluations.csv`` keeps its rows at ``timesteps ≤ s`` (:meth:`EvalLog.truncate_after`);
- ``progress.json`` is cut back to ``s`` (removed at 0);
- tensorboard event files keep their events at ``step ≤ s``: SB3 continues a resumed run in the same
  folder with a new event file (and a restarted one in a new folder), and TensorBoard merges every file
  of a folder, so events after ``s`` would show twice (:func:`rewind_tensorboard`);
- ``summary.json``, ``model.zip`` and ``best_model.zip``, when they come from after ``s``, are removed,
  and so are the temporary files of a write the kill interrupted.

Rewinding only ever removes what comes after ``s``; every file it changes is rewritten atomically.
"""

from __future__ import annotations

import struct
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.record_writer import RecordWriter

from experiments.atomic import atomic_path
from experiments.evaluation import BEST_MODEL, BEST_RECORD, EvalLog
from experiments.run_dir import PROGRESS_FILE, checkpoint_walls, read_json, record_progress

EVENT_GLOB = "*/events.out.tfevents.*"


def read_records(path: Path) -> list[bytes]:
    """The complete records of a TFRecord file (tensorboard's event format: a length, its CRC, the
    data, its CRC); a record cut short by a kill ends the list."""
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
    """Keep only the events at ``step ≤ steps`` in every tensorboard event file of the run. A file left
    without a summary is removed, and so is a folder left empty (SB3 then reuses its name)."""
    emptied = set()
    for path in sorted(directory.glob(EVENT_GLOB)):
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
    for folder in emptied:
        if not any(folder.iterdir()):
            folder.rmdir()


def wall_seconds_at(directory: Path, steps: int) -> float:
    """Training wall-clock seconds when the checkpoint at ``steps`` was saved (0 at step 0)."""
    walls = checkpoint_walls(directory)
    if steps in walls:
        return float(walls[steps])
    earlier = [float(r["wall_seconds"]) for r in EvalLog(directory / "evaluations.csv").rows()
               if int(float(r["timesteps"])) <= steps]
    return earlier[-1] if earlier else 0.0


def rewind(directory: Path, steps: int) -> float:
    """Drop every record of the run in ``directory`` after ``steps`` (see the module doc); returns the
    wall-clock seconds of training up to ``steps``."""
    wall = wall_seconds_at(directory, steps) if steps else 0.0
    log = EvalLog(directory / "evaluations.csv")
    evaluations_dropped = any(int(float(r["timesteps"])) > steps for r in log.rows())
    log.truncate_after(steps)
    if steps:
        record_progress(directory, steps, wall, {k: v for k, v in checkpoint_walls(directory).items() if k <= steps})
    else:
        (directory / PROGRESS_FILE).unlink(missing_ok=True)
    rewind_tensorboard(directory, steps)
    for tmp in [*directory.glob(".*.tmp*"), *directory.glob("checkpoints/.*.tmp*")]:
        tmp.unlink()
    summary = read_json(directory / "summary.json")
    if summary is None or summary["env_steps"] > steps:
        for name in ("summary.json", "model.zip"):
            (directory / name).unlink(missing_ok=True)
    best = read_json(directory / BEST_RECORD)
    if best["timesteps"] > steps if best is not None else evaluations_dropped:
        for name in (BEST_MODEL, BEST_RECORD):
            (directory / name).unlink(missing_ok=True)
    return wall

