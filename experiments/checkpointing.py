"""A run's checkpoints on disk: each written whole (a temporary file renamed into place, so a run killed at any
moment leaves the previous one intact) with the record of its run's settings (:mod:`experiments.run_identity`),
and pruned to the newest few and the best."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm

from experiments.atomic import atomic_path
from experiments.run_dir import best_checkpoint, checkpoints
from experiments.run_identity import add_record


def save_model_atomic(model: BaseAlgorithm, path: Path, record: dict[str, Any] | None = None) -> None:
    """``model.save`` to ``path`` (a ``.zip``) whole or not at all (:func:`experiments.atomic.atomic_path`), with
    ``record``, the settings of its run, inside it (:func:`experiments.run_identity.add_record`)."""
    with atomic_path(path) as tmp:
        model.save(tmp)
        if record is not None:
            add_record(tmp, record)


def prune_checkpoints(directory: Path, keep: int, rows: list[dict[str, str]]) -> list[int]:
    """Delete every checkpoint in ``directory`` but the newest ``keep`` and the best one (see
    :func:`experiments.run_dir.best_checkpoint`; SB3's ``CheckpointCallback`` keeps all); ``keep`` 0
    keeps them all. Returns the steps of the checkpoints left."""
    found = checkpoints(directory)
    if keep <= 0:
        return [steps for _, steps in found]
    kept = found[-keep:]
    best = best_checkpoint(found, rows)
    if best is not None and best not in kept:
        kept.insert(0, best)
    for path, steps in found:
        if (path, steps) not in kept:
            path.unlink()
    return [steps for _, steps in kept]


