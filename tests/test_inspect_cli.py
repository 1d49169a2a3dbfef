"""``train_rl.py inspect``: a run's episodes become saliency (and, for attention backbones, attention) maps, PNG and
JSON, with the recall distance of each decision; bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import train_rl

TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "4", "--eval-freq", "0",
        "--n-eval-episodes", "2", "--checkpoint-freq", "0", "--threads", "1",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4",
        "gtrxl.memory_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2", "ffm.hidden_size=16", "n_eval_envs=2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Tiny runs of 64 steps of GTrXL and FFM on T-Maze-3."""
    log_dir = tmp_path_factory.mktemp("runs")
    for backbone in ("gtrxl", "ffm"):
        own = [arg for arg in TINY if arg.split(".")[0] not in ("gtrxl", "ffm") or arg.startswith(f"{backbone}.")]
        assert train_rl.main([*own, "--backbone", backbone, "-n", "64", "--log-dir", str(log_dir)]) == 0
    return log_dir


def inspect(argv: list[str], capsys) -> tuple[int, str, str]:
    code = train_rl.main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_writes_saliency_and_attention_maps_of_each_episode(runs, tmp_path, capsys):
    run = runs / "TMaze-v0__ppo-gtrxl__0"
    code, out, _ = inspect([str(run), "--episodes", "2", "--out", str(tmp_path / "maps")], capsys)
    assert code == 0 and "episode 1 (seed 10001)" in out
    result = json.loads((tmp_path / "maps" / "inspect.json").read_text())
    assert result["backbone"] == "gtrxl" and len(result["episodes"]) == 2
    for index, episode in enumerate(result["episodes"]):
        T = episode["length"]
        assert len(episode["saliency"]) == T and all(not any(row[t + 1:]) for t, row in enumerate(episode["saliency"]))
        assert 0 in episode["events"] and len(episode["recall_distance"]) == T
        (attention,) = episode["attention"]
        assert attention["layer"] == "layers.0.attn" and len(attention["weights"]) == 2  # heads
        assert episode["figures"] == {"saliency": f"saliency_{index}.png", "attention": f"attention_{index}.png"}
        for figure in episode["figures"].values():
            assert (tmp_path / "maps" / figure).read_bytes().startswith(b"\x89PNG")


def test_a_recurrent_backbone_gets_saliency_alone(runs, capsys):
    run = runs / "TMaze-v0__ppo-ffm__0"
    code, _, _ = inspect([str(run), "--episodes", "1"], capsys)
    assert code == 0
    episode = json.loads((run / "inspect" / "inspect.json").read_text())["episodes"][0]
    assert episode["attention"] == [] and episode["figures"] == {"saliency": "saliency_0.png"}


@pytest.mark.parametrize("argv,message", [
    (["--episodes", "0"], "--episodes=0: expected an integer >= 1"),
    (["--max-steps", "-1"], "--max-steps=-1: expected an integer >= 1"),
    (["--seed", "-5"], "--seed=-5: expected an integer in [0, 4294967292] (episode i is seeded seed + i, at most "
                        "2**32 - 1, with --episodes 4)"),
])
def test_bad_input_exits_2_naming_it(argv, message, runs, capsys):
    code, _, err = inspect([str(runs / "TMaze-v0__ppo-gtrxl__0"), *argv], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_bad_flag_value_exits_2_on_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_rl.main(["inspect", "somewhere", "--episodes", "two"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "argument --episodes/-n: invalid int value: 'two'" in err
    assert len(err.strip().splitlines()) == 1


def test_a_path_without_a_model_exits_2(tmp_path, capsys):
    code, _, err = inspect([str(tmp_path)], capsys)
    assert code == 2 and "holds no model.zip" in err


def test_a_decision_that_reads_no_earlier_step_is_said_so():
    """A one-step episode (Blackjack's) has no earlier step to read: the summary says so, not `step None`."""
    from experiments.cli.inspect import reads

    assert reads([{"step": 0, "memory_peak": None, "recall_distance": None}]) == \
        "the decision at step 0 reads no earlier step"
    assert "reads step 2 most" in reads([{"step": 5, "memory_peak": 2, "recall_distance": 1.5}])


def test_an_earlier_inspect_is_never_overwritten_nor_mixed(runs, tmp_path, capsys):
    """A second inspect of a run goes to `inspect-2` (the first's four figures stay beside their own JSON, not
    mixed with a later one's two); an `--out` that holds files, or lies in a run directory, is refused before
    anything is written."""
    run = runs / "TMaze-v0__ppo-ffm__0"
    first = run / "inspect"
    if not (first / "inspect.json").exists():
        assert inspect([str(run), "--episodes", "1"], capsys)[0] == 0
    before = {path.name: path.read_bytes() for path in first.iterdir()}
    code, out, _ = inspect([str(run), "--episodes", "2"], capsys)
    assert code == 0 and "inspect-2: inspect.json" in out
    assert {path.name: path.read_bytes() for path in first.iterdir()} == before
    assert len(json.loads((run / "inspect-2" / "inspect.json").read_text())["episodes"]) == 2
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("x")
    code, _, err = inspect([str(run), "--out", str(full)], capsys)
    assert code == 2 and "already holds files" in err and len(err.strip().splitlines()) == 1
    code, _, err = inspect([str(run), "--out", str(first)], capsys)  # a path the user names is never in a run
    assert code == 2 and "would be inside the run directory" in err and len(err.strip().splitlines()) == 1
    assert {path.name: path.read_bytes() for path in first.iterdir()} == before
    assert (full / "mine.txt").read_text() == "x" and len(list(full.iterdir())) == 1


BOX_ACTIONS = """import gymnasium as gym
import numpy as np


class Env(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (2, 2), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), float(-np.square(action).sum()), self.t >= 4, False, {}
"""


def test_a_run_with_multi_dimensional_box_actions_is_inspected(tmp_path, monkeypatch, capsys):
    """Actions of shape (2, 2) are scored, deterministic or sampled, by the Gaussian's standardised mean over the four
    action dimensions (mutation caught: the log-probability of the mean action, whose gradient is 0 everywhere)."""
    (tmp_path / "box_actions.py").write_text(BOX_ACTIONS)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert train_rl.main(["--env", "box_actions:Env", "--backbone", "mlp", "-n", "32", "--n-envs", "1",
                          "--eval-freq", "0", "--n-eval-episodes", "1", "--checkpoint-freq", "0",
                          "--log-dir", str(tmp_path), "-p", "n_eval_envs=1", "ppo.n_steps=32",
                          "ppo.batch_size=32", "ppo.n_epochs=1", "mlp.hidden_size=8"]) == 0
    for mode in ([], ["--stochastic"]):
        out = tmp_path / f"maps{len(mode)}"
        code, _, _ = inspect([str(tmp_path / "box_actions-Env__ppo-mlp__0"), "--episodes", "1", *mode,
                              "--out", str(out)], capsys)
        assert code == 0
        (episode,) = json.loads((out / "inspect.json").read_text())["episodes"]
        assert episode["length"] == 4 and all(row[t] > 0 for t, row in enumerate(episode["saliency"]))
        assert [len(action) for action in episode["actions"]] == [2, 2, 2, 2]


def test_a_failure_after_out_was_made_leaves_no_empty_directory(runs, tmp_path, monkeypatch, capsys):
    import experiments.saliency

    def broken(*args, **kwargs):
        raise RuntimeError("saliency failed")

    monkeypatch.setattr(experiments.saliency, "saliency", broken)
    with pytest.raises(RuntimeError, match="saliency failed"):
        inspect([str(runs / "TMaze-v0__ppo-ffm__0"), "--episodes", "1", "--out", str(tmp_path / "maps")], capsys)
    assert not (tmp_path / "maps").exists()
    (tmp_path / "given").mkdir()  # an empty directory the user made is kept
    with pytest.raises(RuntimeError, match="saliency failed"):
        inspect([str(runs / "TMaze-v0__ppo-ffm__0"), "--episodes", "1", "--out", str(tmp_path / "given")], capsys)
    assert (tmp_path / "given").is_dir()


@pytest.mark.parametrize("where", ["a later episode", "inspect.json"])
def test_an_inspect_that_fails_midway_removes_what_it_wrote(runs, tmp_path, monkeypatch, capsys, where):
    """A failure after some episodes' figures are written (a full disk at a later figure or at inspect.json, an
    interrupt) leaves no half output: the figures go, and the folder made for them (mutation caught: only an
    empty folder removed)."""
    import envs.atomic

    calls = []
    save_figure = envs.atomic.save_figure

    def full_on_the_third_figure(figure, path):
        calls.append(path)
        if where == "a later episode" and len(calls) == 3:
            raise OSError(28, "No space left on device", str(path))
        save_figure(figure, path)

    def full_at_the_record(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(envs.atomic, "save_figure", full_on_the_third_figure)
    if where == "inspect.json":
        monkeypatch.setattr(envs.atomic, "write_atomic", full_at_the_record)
    code, _, err = inspect([str(runs / "TMaze-v0__ppo-gtrxl__0"), "--episodes", "2", "--out",
                            str(tmp_path / "maps")], capsys)
    assert code == 1 and "No space left on device" in err, err
    assert len(calls) >= 2 and not (tmp_path / "maps").exists()
