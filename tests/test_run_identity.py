"""A run's identity is checked on resume whatever is missing: every model a run saves records its settings, so a
``--resume`` with other settings is refused by name even when ``config.yaml`` was lost or rewritten; a ``--resume``
whose budget is already behind the newest checkpoint ends the run there, never writing a step-0 checkpoint."""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

import train_rl
from experiments.cli.train import config_from_args, make_parser
from experiments.config import ConfigError
from experiments.run_identity import NOT_COMPARED, RECORD_ENTRY, config_record, read_record
from experiments.studies.study import check_consistency
from experiments.training import train

TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "2", "--threads", "1", "-n", "64",
        "--eval-freq", "32", "--checkpoint-freq", "32", "--n-eval-episodes", "2",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4", "gtrxl.d_model=16",
        "gtrxl.n_heads=2", "gtrxl.memory_length=4", "n_eval_envs=2"]
RUN = "TMaze-v0__ppo-gtrxl__0"
OTHER = ["-p", "ppo.n_steps=32", "gtrxl.memory_length=2"]
"""settings that differ from the run's: the learner's rollout and the backbone's memory"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("identity")
    assert train_rl.main([*TINY, "--log-dir", str(log_dir)]) == 0
    return log_dir / RUN


def unfinished(finished: Path, log_dir: Path, *lost: str) -> Path:
    """A copy of the run killed after its last checkpoint (no model.zip or summary), without the files ``lost``."""
    run = log_dir / RUN
    shutil.copytree(finished, run)
    for name in ("model.zip", "summary.json", *lost):
        (run / name).unlink()
    return run


def digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != "run.lock"}


def config(argv: list[str]):
    return config_from_args(make_parser().parse_args(argv))


def test_every_model_a_run_saves_records_its_settings(finished: Path):
    expected = config_record(config([*TINY, "--log-dir", str(finished.parent)]))
    for path in [finished / "model.zip", finished / "best_model.zip", *(finished / "checkpoints").iterdir()]:
        record = read_record(path)
        assert record is not None and not record.partial, path
        assert record.settings == json.loads(json.dumps(expected)), path


def test_a_resume_without_config_yaml_is_refused_naming_what_differs_from_the_checkpoints(finished, tmp_path, capsys):
    run = unfinished(finished, tmp_path / "lost", "config.yaml")
    before = digest(run)
    code = train_rl.main([*TINY, *OTHER, "--log-dir", str(tmp_path / "lost"), "--resume", "-n", "128"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"error: --resume with a configuration that differs from its checkpoint "
                   f"{str(run / 'checkpoints' / 'model_64_steps.zip')!r} in: gtrxl.memory_length (4 in the run, "
                   "2 now), ppo.n_steps (16 in the run, 32 now)\n")
    assert digest(run) == before and not (run / "config.yaml").exists()
    with pytest.raises(ConfigError, match="differs from its checkpoint"):  # the Python API alike
        train(config([*TINY, *OTHER, "--log-dir", str(tmp_path / "lost")]), resume=True)
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "lost"), "--resume", "-n", "96"]) == 0  # its own: resumes


def test_a_rewritten_config_yaml_does_not_hide_the_checkpoints_settings(finished, tmp_path, capsys):
    run = unfinished(finished, tmp_path / "rewritten")
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("n_steps: 16", "n_steps: 32").replace("memory_length: 4",
                                                                                       "memory_length: 2"))
    assert train_rl.main([*TINY, *OTHER, "--log-dir", str(tmp_path / "rewritten"), "--resume"]) == 2
    assert "differs from its checkpoint" in capsys.readouterr().err


def test_a_study_refuses_a_run_whose_checkpoints_hold_other_settings(finished, tmp_path):
    unfinished(finished, tmp_path / "study", "config.yaml")
    with pytest.raises(ConfigError, match=r"already holds a run of another configuration \(differs in: "
                                          r"gtrxl.memory_length \(4 in the run, 2 now\)"):
        check_consistency([config([*TINY, *OTHER, "--log-dir", str(tmp_path / "study")])])


def test_a_model_saved_before_records_is_checked_on_what_sb3_keeps(finished, tmp_path, capsys):
    run = unfinished(finished, tmp_path / "old", "config.yaml")
    for path in (run / "checkpoints").iterdir():  # as saved before records: SB3's entries only
        with zipfile.ZipFile(path) as source:
            entries = {name: source.read(name) for name in source.namelist() if name != RECORD_ENTRY}
        with zipfile.ZipFile(path, "w") as target:
            for name, data in entries.items():
                target.writestr(name, data)
        record = read_record(path)
        assert record.partial and record.settings["ppo"]["n_steps"] == 16 and record.settings["gtrxl"]["d_model"] == 16
    assert train_rl.main([*TINY, *OTHER, "--log-dir", str(tmp_path / "old"), "--resume"]) == 2
    assert "gtrxl.memory_length (4 in the run, 2 now), ppo.n_steps (16 in the run, 32 now)" in capsys.readouterr().err
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "old"), "--resume", "-n", "96"]) == 0


def test_a_budget_behind_the_newest_checkpoint_ends_the_run_there(finished, tmp_path, capsys):
    run = unfinished(finished, tmp_path / "behind")
    progress = (run / "progress.json").read_text()
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "behind"), "--resume", "-n", "32"]) == 0
    err = capsys.readouterr().err
    assert "its newest checkpoint (64 steps) reaches total_timesteps=32: nothing to train" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints  # no model_0_steps.zip
    assert (run / "progress.json").read_text() == progress
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 64
    before = digest(run)
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "behind"), "--resume", "-n", "32"]) == 0
    assert "already finished (64 steps of 32): nothing to resume, nothing changed" in capsys.readouterr().err
    assert digest(run) == before


def test_the_docs_name_every_setting_a_resume_may_change():
    """docs/run-directories.md's Resume section lists the settings `NOT_COMPARED` (mutation caught: a key added to
    it and not to the docs)."""
    section = (Path(__file__).resolve().parents[1] / "docs" / "run-directories.md").read_text().split("## Resume")[1]
    paragraph = section.split("\n\n")[1]
    assert all(f"`{key}`" in paragraph for key in NOT_COMPARED), paragraph


def test_a_resume_refusal_names_the_keyword_argument_that_differs(finished, tmp_path, capsys):
    """A mapping setting is compared key by key: the refusal names `env_kwargs.length`, with both values, however
    long the mapping."""
    unfinished(finished, tmp_path)
    argv = [*TINY, "--log-dir", str(tmp_path), "--resume"]
    argv[argv.index("length=3")] = "length=4"
    assert train_rl.main(argv) == 2
    assert "differs from" in (err := capsys.readouterr().err) and "in: env_kwargs.length (3 in the run, 4 now)" in err
