"""A run's checkpoints: written whole (a save interrupted midway leaves the previous checkpoint), and pruned to the
newest ``keep`` and the best."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.run_dir import CHECKPOINTS, RunDirectory


class _Model:
    """What :meth:`RunDirectory.save_model` needs of an SB3 model: ``save``, which here writes half and fails on
    demand."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def save(self, path: Path) -> None:
        Path(path).write_text("half" if self.fail else "new")
        if self.fail:
            raise OSError("disk full")


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path: Path):
    """The save goes to a temporary name and is renamed into place only when complete (mutation caught: saving
    straight to ``path``)."""
    run = RunDirectory(tmp_path)
    path = run.save_model(_Model(fail=False))
    assert path == tmp_path / "model.zip"
    assert path.read_text() == "new"
    path.write_text("previous")
    with pytest.raises(OSError, match="disk full"):
        run.save_model(_Model(fail=True))
    assert path.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip"]  # no temporary file left


def test_checkpoints_are_pruned_to_the_newest_and_the_best(tmp_path: Path):
    """The newest ``keep`` and the one whose evaluation (at or before its step) scored best (mutation
    caught: the best one not kept)."""
    run = RunDirectory(tmp_path)
    (tmp_path / CHECKPOINTS).mkdir()
    for steps in (10, 20, 30, 40, 50, 60):
        (tmp_path / CHECKPOINTS / f"model_{steps}_steps.zip").write_text("")
    for s, r in ((10, 0.1), (20, 0.9), (40, 0.5)):
        run.evaluations.append({"timesteps": s, "mean_return": r})
    assert run.prune_checkpoints(0) == [10, 20, 30, 40, 50, 60]
    assert run.prune_checkpoints(3) == [20, 40, 50, 60]
    assert [steps for _, steps in run.checkpoints()] == [20, 40, 50, 60]
    assert run.prune_checkpoints(1) == [20, 60]


def test_a_saved_checkpoint_prunes_and_records_its_wall_seconds(tmp_path: Path):
    """``save_checkpoint`` writes the checkpoint, prunes to ``keep`` and the best, and ``progress.json`` keeps the
    training seconds of exactly the checkpoints left."""
    run = RunDirectory(tmp_path)
    for steps in (10, 20, 30):
        run.save_checkpoint(_Model(fail=False), steps, steps / 10, keep=2)
    assert [steps for _, steps in run.checkpoints()] == [20, 30]
    assert run.checkpoint_walls() == {20: 2.0, 30: 3.0}
    assert run.progress()["timesteps"] == 30
