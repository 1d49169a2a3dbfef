"""A run's checkpoints on disk: each written whole (a temporary file renamed into place, so a run killed at any
moment leaves the previous one intact), and pruned to the newest few and the best."""

from __future__ import annotations

from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm

from experiments.run_dir import best_checkpoint, checkpoints, replace_synced, temporary_name


def save_model_atomic(model: BaseAlgorithm, path: Path) -> None:
    """``model.save`` to a temporary file, flushed to disk and renamed over ``path`` (a ``.zip``)."""
    tmp = temporary_name(path)
    model.save(tmp)
    replace_synced(tmp, path)


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


