"""The pure parts of ``notebooks/cleanrl_compare.py`` (no CleanRL needed, nothing timed).

Mutations these catch: reading CleanRL's first ``SPS=`` line instead of its last (the cumulative one);
the ratio of the median speeds instead of the median of per-round ratios; a CleanRL flag that drifts from
engram's config (e.g. ``--num-minibatches`` given the minibatch size); booleans passed as values
instead of tyro's ``--name`` / ``--no-name``; a budget that is not a whole number of rollouts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from experiments.config import build_config

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CONFIG = NOTEBOOKS.parent / "configs" / "minigrid_memory_s9_cleanrl.yaml"

CLEANRL_OUTPUT = """\
/x/tyro/_fields.py:181: UserWarning: The field target_kl is annotated with type <class 'float'>
  warnings.warn(
        1 SPS= 181 return=0.23 length=69.9 pi_loss=0.010 v_loss=0.892 entropy=1.943 r_loss=0.000 value=0.048
        2 SPS= 170 return=0.25 length=71.2 pi_loss=0.011 v_loss=0.412 entropy=1.941 r_loss=0.000 value=0.051
        3 SPS= 166 return=0.22 length=70.3 pi_loss=0.009 v_loss=0.301 entropy=1.940 r_loss=0.000 value=0.050
"""


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    sys.path.insert(0, str(NOTEBOOKS))  # the script imports its sibling ``common``
    try:
        spec = importlib.util.spec_from_file_location("cleanrl_compare", NOTEBOOKS / "cleanrl_compare.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(NOTEBOOKS))
    return module


def test_last_sps_line_counts(compare: ModuleType) -> None:
    parsed = compare.parse_cleanrl_output(CLEANRL_OUTPUT, rollout=4096)
    assert parsed == {"iterations": 3, "env_steps": 12_288, "steps_per_second": 166}
    with pytest.raises(ValueError, match="SPS="):
        compare.parse_cleanrl_output("Traceback ...\nKeyError: 'r_mean'\n", rollout=4096)


def rounds(engram: list[float], cleanrl: list[float]) -> list[dict]:
    """Rounds whose whole-process speeds are half (engram) and all (CleanRL) of their training speeds."""
    pairs = zip(engram, cleanrl, strict=True)
    return [{"engram": {"steps_per_second": e, "process_steps_per_second": e / 2},
             "cleanrl": {"steps_per_second": c, "process_steps_per_second": c}} for e, c in pairs]


def test_median_of_per_round_ratios(compare: ModuleType) -> None:
    # ratios 1.0, 0.5, 3.0: median 1.0; the ratio of the median speeds would be 200 / 100 = 2.0
    summary = compare.summarise(rounds([100, 200, 300], [100, 400, 100]))
    assert summary["ratio"] == {"median": 1.0, "min": 0.5, "max": 3.0}
    assert summary["process_ratio"]["median"] == 0.5
    assert summary["engram_steps_per_second"]["median"] == 200
    assert not summary["target_met"]
    assert compare.summarise(rounds([300, 310], [200, 200]))["target_met"]  # 1.5 and 1.55: met at 1.5


def test_cleanrl_flags_mirror_the_engram_config(compare: ModuleType) -> None:
    config = build_config(CONFIG)
    compare.check_env(config)
    flags = compare.cleanrl_arguments(config, steps=12_288, seed=1)
    ppo, trxl = config.algo_options(), config.backbone_options()
    assert flags["env-id"] == config.env == "MiniGrid-MemoryS9-v0"
    assert (flags["total-timesteps"], flags["seed"]) == ("12288", "1")
    assert int(flags["num-envs"]) == config.n_envs and int(flags["num-steps"]) == ppo["n_steps"]
    assert int(flags["num-envs"]) * int(flags["num-steps"]) // int(flags["num-minibatches"]) == ppo["batch_size"]
    assert int(flags["update-epochs"]) == ppo["n_epochs"]
    shapes = {"trxl-num-layers": "n_layers", "trxl-num-heads": "n_heads", "trxl-dim": "d_model",
              "trxl-memory-length": "memory_length"}
    assert {flag: int(flags[flag]) for flag in shapes} == {flag: trxl[key] for flag, key in shapes.items()}
    assert float(flags["clip-coef"]) == ppo["clip_range"] and float(flags["max-grad-norm"]) == ppo["max_grad_norm"]
    # the repo's config is CleanRL's documented MemoryS9 run, budget aside
    assert compare.documented_differences(flags) == []
    changed = compare.cleanrl_arguments(build_config(CONFIG, overrides=["trxl-i.memory_length=32"]), 12_288, 1)
    assert compare.documented_differences(changed) == ["--trxl-memory-length 32 (documented: 64)"]


def test_command_uses_tyro_booleans(compare: ModuleType) -> None:
    command = compare.cleanrl_command("py", "ppo_trxl.py", {"num-envs": "16", "cuda": "false", "clip-vloss": "true"})
    assert command == ["py", "-u", "ppo_trxl.py", "--num-envs", "16", "--no-cuda", "--clip-vloss"]


def test_budget_is_whole_rollouts(compare: ModuleType) -> None:
    config = build_config(CONFIG)
    compare.check_steps(12_288, config)
    for steps in (2048, 0, 12_289):
        with pytest.raises(SystemExit, match="multiple of the rollout, 4096"):
            compare.check_steps(steps, config)
    config.env_kwargs = {**config.env_kwargs, "max_episode_steps": 405}  # ppo_trxl.py always cuts at 96
    with pytest.raises(SystemExit, match="env_kwargs"):
        compare.check_env(config)
