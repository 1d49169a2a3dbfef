"""Defaults may change; what a run saved may not. A model and a run directory record every backbone option,
defaults included, so a later default never changes how they load or resume. Files saved before options were
recorded whole (no ``episode_time``) are refused with a one-line message naming what changed."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import yaml
from stable_baselines3.common.env_util import make_vec_env

import train_rl
from agents import MemoryPPO
from envs import make_env
from policies.registry import BACKBONES, saved_options
from tests.test_cli import TINY

RUN = "TMaze-v0__ppo-gtrxl__0"
BACKBONE = {"d_model": 16, "n_heads": 2, "memory_length": 4}


def _model(**backbone: object) -> MemoryPPO:
    env = make_vec_env(lambda: make_env("TMaze-v0", length=3), n_envs=2)
    return MemoryPPO("MemoryPolicy", env, n_steps=8, batch_size=16, segment_length=4, seed=0,
                     policy_kwargs={"backbone": "gtrxl", "backbone_kwargs": {**BACKBONE, **backbone}})


def _forget(path: Path, option: str) -> None:
    """Rewrite the model at ``path`` as a version that did not record ``option`` would have saved it."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    kwargs = MemoryPPO.load(path).policy_kwargs  # deserialised
    kwargs["backbone_kwargs"] = {k: v for k, v in kwargs["backbone_kwargs"].items() if k != option}
    from stable_baselines3.common.save_util import data_to_json

    data["policy_kwargs"] = json.loads(data_to_json({"policy_kwargs": kwargs}))["policy_kwargs"]
    entries["data"] = json.dumps(data).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    path.write_bytes(buffer.getvalue())


def test_files_without_an_option_are_refused_whatever_its_default():
    assert BACKBONES["gtrxl"].options()["episode_time"] == "none"
    with pytest.raises(ValueError, match="lacks option\\(s\\) episode_time: .* defaults may have changed since"):
        saved_options("gtrxl", {k: v for k, v in BACKBONES["gtrxl"].options().items() if k != "episode_time"})
    assert saved_options("gtrxl", BACKBONES["gtrxl"].resolve({"episode_time": "learned"}))["episode_time"] == "learned"


def test_a_saved_model_records_every_backbone_option(tmp_path):
    model = _model()
    model.save(tmp_path / "model.zip")
    saved = MemoryPPO.load(tmp_path / "model.zip").policy_kwargs["backbone_kwargs"]
    assert saved == BACKBONES["gtrxl"].resolve(BACKBONE)
    assert saved["episode_time"] == "none" and saved["max_episode_time"] == 1024


def test_a_model_saved_before_options_were_recorded_is_refused(tmp_path):
    model = _model(episode_time="none")
    model.save(tmp_path / "model.zip")
    _forget(tmp_path / "model.zip", "episode_time")
    with pytest.raises(ValueError, match="lacks option\\(s\\) episode_time"):
        MemoryPPO.load(tmp_path / "model.zip")


def test_a_run_records_every_option_and_refuses_a_resume_with_a_changed_default(tmp_path, capsys):
    argv = [*TINY, "--log-dir", str(tmp_path), "-n", "64", "--threads", "1"]
    assert train_rl.main(argv) == 0
    config = tmp_path / RUN / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    assert saved["gtrxl"]["episode_time"] == "none" and saved["ppo"]["gae_lambda"] == 0.95
    # the same run as a version before options were recorded would have left it
    del saved["gtrxl"]["episode_time"]
    config.write_text(yaml.safe_dump(saved, sort_keys=False))
    (tmp_path / RUN / "summary.json").unlink()
    capsys.readouterr()
    assert train_rl.main([*argv, "-n", "128", "--resume"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "episode_time" in error


@pytest.mark.parametrize("value", ["none", "sinusoidal"])
def test_resuming_with_the_runs_own_value_is_accepted(tmp_path, value):
    argv = [*TINY, "--log-dir", str(tmp_path), "-n", "64", "--threads", "1", "-p", f"gtrxl.episode_time={value}"]
    assert train_rl.main(argv) == 0
    (tmp_path / RUN / "summary.json").unlink()
    assert train_rl.main([*argv, "-n", "128", "--resume"]) == 0
    assert json.loads((tmp_path / RUN / "summary.json").read_text())["env_steps"] >= 128
