"""``evaluate --render`` and ``--record`` with and without a display: the env's window where one can open, else its
text (ansi), else a one-line refusal before anything is written; recording frames prints no stray error line of
SDL's window-system probe; any image an env renders (grey, channels first, RGBA, floats in [0, 1], frames of
several sizes) is recorded as RGB, and a render that is no image is refused before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import train_rl
from experiments import replay
from experiments.cli.evaluate import render_mode
from experiments.config import RunConfig
from experiments.video import rgb_frames

REPO = Path(__file__).resolve().parents[1]
TINY = ["--env", "CartPole-v1", "--backbone", "mlp", "--n-envs", "2", "--eval-freq", "0", "--n-eval-episodes", "1",
        "--checkpoint-freq", "0", "--threads", "1", "-n", "32", "-p", "ppo.n_steps=16", "ppo.batch_size=32",
        "ppo.n_epochs=1", "n_eval_envs=1"]


@pytest.fixture
def headless(monkeypatch):
    """No display: DISPLAY and WAYLAND_DISPLAY unset on Linux; SDL's drivers unset, and unset again afterwards."""
    monkeypatch.setattr(sys, "platform", "linux")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> Path:
    """A tiny CartPole run: its env has a window (human) and frames (rgb_array) but no text mode."""
    log_dir = tmp_path_factory.mktemp("runs")
    assert train_rl.main([*TINY, "--log-dir", str(log_dir)]) == 0
    return log_dir / "CartPole-v1__ppo-mlp__0"


def agent_on(env: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(config=RunConfig(env=env))


def test_a_display_is_one_named_by_display_or_wayland_display_or_any_on_macos_and_windows(headless, monkeypatch):
    assert not replay.has_display()
    for name, value in (("DISPLAY", ":0"), ("WAYLAND_DISPLAY", "wayland-0")):
        monkeypatch.setenv(name, value)
        assert replay.has_display()
        monkeypatch.delenv(name)
    for platform in ("darwin", "win32"):
        monkeypatch.setattr(sys, "platform", platform)
        assert replay.has_display()


def test_render_shows_the_window_where_a_display_is_else_the_text(headless, monkeypatch):
    assert render_mode(agent_on("Taxi-v4")) == "ansi"
    assert render_mode(agent_on("TMaze-v0")) == "ansi"
    monkeypatch.setenv("DISPLAY", ":0")
    assert render_mode(agent_on("Taxi-v4")) == "human"
    assert render_mode(agent_on("CartPole-v1")) == "human"


def test_render_without_a_display_or_a_text_mode_is_refused_before_anything_is_written(headless, cartpole, capsys):
    before = sorted(cartpole.iterdir())
    assert train_rl.main(["evaluate", str(cartpole), "--render", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: --render: no display")
    assert "DISPLAY and WAYLAND_DISPLAY are unset" in err and "'CartPole-v1'" in err and "--record" in err
    assert sorted(cartpole.iterdir()) == before  # no evaluate_*.json


def test_recording_frames_without_a_display_prints_no_error_line(cartpole, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER")}
    video = tmp_path / "cartpole.gif"
    done = subprocess.run([sys.executable, str(REPO / "train_rl.py"), "evaluate", str(cartpole), "--episodes", "1",
                           "--record", str(video), "--fps", "1000"],
                          env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and video.is_file(), done.stderr
    assert "error" not in done.stderr.lower(), done.stderr


def test_frames_are_drawn_with_sdl_dummy_drivers_only_without_a_display(headless, monkeypatch):
    replay.headless_sdl()
    assert os.environ["SDL_VIDEODRIVER"] == os.environ["SDL_AUDIODRIVER"] == "dummy"
    for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("DISPLAY", ":0")
    replay.headless_sdl()
    assert "SDL_VIDEODRIVER" not in os.environ and "SDL_AUDIODRIVER" not in os.environ


def test_a_run_trained_with_a_render_mode_is_recorded_in_the_records_mode(tmp_path):
    """A run whose env_kwargs hold a render_mode (`--env-kwargs render_mode=rgb_array`) records too: the
    recording's mode replaces the run's, rather than both reaching the env's constructor."""
    assert train_rl.main([*TINY, "--env-kwargs", "render_mode=rgb_array", "--log-dir", str(tmp_path)]) == 0
    video = tmp_path / "x.gif"
    assert train_rl.main(["evaluate", str(tmp_path / "CartPole-v1__ppo-mlp__0"), "--episodes", "1",
                          "--record", str(video), "--fps", "1000"]) == 0
    assert video.is_file()


GREY = np.array([[0, 255], [128, 64]], dtype=np.uint8)
RGB = np.repeat(GREY[..., None], 3, axis=-1)


@pytest.mark.parametrize(("frame", "expected"), [
    (GREY, RGB),
    (GREY[..., None], RGB),
    (np.moveaxis(RGB, -1, 0), RGB),  # channels first
    (np.concatenate([RGB, np.full((2, 2, 1), 7, np.uint8)], axis=-1), RGB),  # RGBA: the alpha is dropped
    (GREY / 255.0, RGB),  # floats in [0, 1]
    (GREY.astype(np.float64), RGB),  # floats in [0, 255]
    (GREY.astype(np.int64) * 4 - 300, np.repeat(np.clip(GREY.astype(np.int64) * 4 - 300, 0, 255)[..., None], 3, -1)),
    (GREY > 100, np.repeat(np.where(GREY > 100, 255, 0)[..., None], 3, -1).astype(np.uint8)),
])
def test_any_rendered_image_becomes_rgb_bytes(frame, expected) -> None:
    [image] = rgb_frames([frame])
    assert image.dtype == np.uint8 and image.shape == (2, 2, 3)
    np.testing.assert_array_equal(image, expected)


def test_frames_of_several_sizes_are_centred_on_the_largest() -> None:
    small, large = rgb_frames([np.full((2, 2, 3), 200, np.uint8), np.full((4, 6, 3), 9, np.uint8)])
    assert small.shape == large.shape == (4, 6, 3)
    assert (small[1:3, 2:4] == 200).all() and small.sum() == 200 * 12


@pytest.mark.parametrize(("frame", "named"), [
    (None, "render() gave None for frame 0"),
    (np.zeros(5), "an array of shape (5,)"),
    (np.array([["a", "b"]]), "dtype <U1"),
    (np.zeros((0, 4, 3)), "an array of shape (0, 4, 3)"),
    (np.zeros((2, 2, 2, 3)), "an array of shape (2, 2, 2, 3)"),
])
def test_a_render_that_is_no_image_is_named(frame, named) -> None:
    with pytest.raises(ValueError, match="expected an image") as raised:
        rgb_frames([frame])
    assert named in str(raised.value)


RENDERING = """
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Drawn(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, render_mode=None, image="grey"):
        self.render_mode, self.image, self.t = render_mode, image, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 3, False, {}

    def render(self):
        if self.image == "grey":  # floats in [0, 1], one channel, channels first
            return np.full((1, 20, 30), 0.5)
        return np.zeros(7)
"""


@pytest.mark.parametrize("image", ["grey", "vector"])
def test_a_users_env_records_any_image_and_is_refused_for_none(tmp_path, monkeypatch, capsys, image) -> None:
    (tmp_path / "drawn_envs.py").write_text(RENDERING)
    monkeypatch.syspath_prepend(str(tmp_path))
    log_dir = tmp_path / "runs"
    tiny = [word if word != "CartPole-v1" else "drawn_envs:Drawn" for word in TINY]
    assert train_rl.main([*tiny, "--env-kwargs", f"image={image}", "--log-dir", str(log_dir)]) == 0
    [run] = log_dir.iterdir()
    before = sorted(run.iterdir())
    video = tmp_path / "drawn.gif"
    code = train_rl.main(["evaluate", str(run), "--episodes", "1", "--record", str(video), "--fps", "1000"])
    err = capsys.readouterr().err
    if image == "vector":
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "--record: env='drawn_envs:Drawn' cannot render in 'rgb_array' mode" in err
        assert "render() gave an array of shape (7,)" in err
        assert not video.exists() and sorted(run.iterdir()) == before
        return
    assert code == 0, err
    with Image.open(video) as gif:
        pixels = np.asarray(gif.convert("RGB"))
    assert pixels.shape[2] == 3 and (pixels == 128).all()  # grey 0.5, not black
