"""A run's checkpoints: written whole (a save interrupted midway leaves the previous checkpoint), and pruned to the
newest ``keep`` and the best."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.checkpointing import prune_checkpoints, save_model_atomic
from experiments.run_dir import checkpoints


class _Model:
    """What :func:`save_model_atomic` needs of an SB3 model: ``save``, which here writes half and fails on demand."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def save(self, path: Path) -> None:
        Path(path).write_text("half" if self.fail else "new")
        if self.fail:
            raise OSError("disk full")


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path: Path):
    """The save goes to a temporary name and is renamed into place only when complete (mutation caught: saving
    straight to ``path``)."""
    path = tmp_path / "model.zip"
    save_model_atomic(_Model(fail=False), path)
    assert path.read_text() == "new"
    path.write_text("previous")
    with pytest.raises(OSError, match="disk full"):
        save_model_atomic(_Model(fail=True), path)
    assert path.read_text() == "previous"


def test_checkpoints_are_pruned_to_the_newest_and_the_best(tmp_path: Path):
    """The newest ``keep`` and the one whose evaluation (at or before its step) scored best (mutation
    caught: the best one not kept)."""
    for steps in (10, 20, 30, 40, 50, 60):
        (tmp_path / f"model_{steps}_steps.zip").write_text("")
    rows = [{"timesteps": str(s), "mean_return": str(r)} for s, r in ((10, 0.1), (20, 0.9), (40, 0.5))]
    assert prune_checkpoints(tmp_path, 0, rows) == [10, 20, 30, 40, 50, 60]
    assert prune_checkpoints(tmp_path, 3, rows) == [20, 40, 50, 60]
    assert [steps for _, steps in checkpoints(tmp_path)] == [20, 40, 50, 60]
    assert prune_checkpoints(tmp_path, 1, rows) == [20, 60]
