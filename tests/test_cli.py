"""train_rl.py: bad input exits with status 2 and names it; runs write their directory; --resume
after a killed run finishes the requested steps without losing logs or evaluations."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import train_rl
from agents import MemoryPPO
from experiments.config import ConfigError, algo_defaults, build_config, coerce, parse_value

REPO = Path(__file__).resolve().parents[1]
TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "4", "--eval-freq", "64",
        "--n-eval-episodes", "4", "--checkpoint-freq", "64",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4",
        "gtrxl.memory_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2", "n_eval_envs=2"]


@pytest.mark.parametrize("argv,message", [
    (["--algo", "dqn"], "invalid choice: 'dqn'"),
    (["--backbone", "transformer"], "invalid choice: 'transformer'"),
    (["--env", "TMaze-v9"], "TMaze-v9"),
    (["--env-kwargs", "lenght=5"], "lenght"),
    (["-p", "ppo.learning_rat=1e-3"], "unknown option 'learning_rat' for ppo; valid options: learning_rate"),
    (["-p", "ppo.n_steps=many"], "ppo.n_steps='many': expected an integer"),
    (["-p", "gtrxl.gate=lstm"], "gtrxl.gate='lstm': expected one of residual, input"),
    (["-p", "gtrxl.memory_len=8"], "unknown option 'memory_len' for gtrxl; valid options: d_model"),
    (["-p", "gtrxl.attention_options.top_k=2"], "unknown option 'attention_options.top_k' for gtrxl: an option is "
                                                "set whole, so a mapping option takes "
                                                "gtrxl.attention_options={top_k: 2}; valid options: d_model"),
    (["-p", "colour=blue"], "unknown configuration key 'colour'; valid keys: algo"),
    (["-p", "seed"], "not of the form dotted.key=value"),
    (["-p", "ppo.batch_size=30"], "ppo.batch_size=30: expected a multiple of the training segment, "
                                  "ppo.segment_length=4"),
    (["-p", "policy.activation_fn=swish"], "policy.activation_fn='swish': expected one of tanh"),
    (["--config", "configs/missing.yaml"], "config file 'configs/missing.yaml' does not exist"),
    (["-n", "0", "--n-envs", "0"], "n_envs=0: expected an integer >= 1"),
    (["--threads", "-2"], "threads=-2: expected an integer >= 0 (0: every core)"),
    (["--stop-when-solved", "-1"], "stop_when_solved=-1: expected an integer >= 0 (0: never stop early)"),
    (["--vec-env", "torch", "--env-kwargs", "length=3", "render_mode=rgb_array"], "vec_env='torch': env_kwargs: "),
    (["--vec-env", "gpu"], "invalid choice: 'gpu' (choose from dummy, subproc, torch)"),
])
def test_bad_input_exits_2_naming_it(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(train_rl.main([*TINY, "--log-dir", str(tmp_path), *argv]))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_values_are_parsed_safely():
    assert parse_value("1e-3") == 0.001 and parse_value("[64, 64]") == [64, 64]
    assert parse_value("true") is True and parse_value("null") is None and parse_value("") == ""  # `key=`: as typed
    assert parse_value("{top_k: 2, local_window: 4}") == {"top_k": 2, "local_window": 4}
    assert parse_value("lin_5e-4") == "lin_5e-4" and parse_value("a: b") == "a: b"
    assert parse_value("__import__('os').system('echo pwned')") == "__import__('os').system('echo pwned')"
    assert coerce("x", "3e-4", 0.1) == 3e-4 and coerce("n", 1e5, 1) == 100000
    assert coerce("d_inner", 256, None) == 256 and isinstance(coerce("d_inner", 256, None), int)
    assert coerce("target_kl", "0.02", None) == 0.02 and coerce("target_kl", None, None) is None
    assert coerce("lr", "lin_1e-3", 0.1)(0.5) == pytest.approx(5e-4)
    assert coerce("lr", "lin_2e-3_1e-3", 0.1)(0.0) == pytest.approx(1e-3)
    schedule_default = algo_defaults("ppo")["learning_rate"]  # PPO's default is a schedule; numbers still replace it
    assert coerce("lr", "3e-4", schedule_default) == 3e-4 and coerce("lr", "lin_2e-3", schedule_default)(0.5) == 1e-3
    with pytest.raises(ConfigError, match="lin_<start> or lin_<start>_<end>"):
        coerce("lr", "lin_fast", 0.1)
    with pytest.raises(ConfigError, match="expected true or false"):
        coerce("flag", "yes please", True)


def test_precedence_defaults_file_flags_overrides(tmp_path):
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump({"seed": 3, "n_envs": 8, "gtrxl": {"memory_length": 16, "d_model": 32},
                                    "lstm": {"hidden_size": 32}}))
    config = build_config(file, {"n_envs": 4, "backbone": "lstm"}, ["lstm.hidden_size=64"])
    assert (config.seed, config.n_envs, config.backbone) == (3, 4, "lstm")
    assert config.backbone_options() == {"hidden_size": 64}
    assert "gtrxl" not in config.options  # the file's section of another backbone: a menu item this run leaves


def test_every_shipped_config_is_valid():
    configs = sorted((REPO / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        build_config(path)


def test_run_directory_layout(tmp_path):
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "128"]) == 0
    run = tmp_path / "TMaze-v0__ppo-gtrxl__0"
    for name in ("config.yaml", "evaluations.csv", "model.zip", "best_model.zip", "summary.json", "progress.json"):
        assert (run / name).exists(), name
    assert list(run.glob("MemoryPPO_1/events.out.tfevents.*"))
    assert list((run / "checkpoints").glob("model_*_steps.zip"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 128 and 0.0 <= summary["final_success_rate"] <= 1.0
    assert {"final_mean_return", "final_std_return", "wall_seconds", "steps_per_second"} <= set(summary)
    assert summary["buffer_bytes_per_step"] >= 1 * 16 * 4  # at least one record: [layers = 1, d_model] float32
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["gtrxl"]["memory_length"] == 4 and resolved["env_kwargs"] == {"length": 3}
    assert [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())] == [64, 128]
    assert summary["torch_threads"] == 1  # one thread by default: more collapse once a core is busy


def test_finished_run_is_not_overwritten(tmp_path, capsys):
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0"]) == 0
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0"]) == 2
    assert "already holds a finished run" in capsys.readouterr().err


def test_resume_after_kill_loses_nothing(tmp_path):
    """Kill a run (SIGKILL) after its first checkpoints, resume it, and check it reaches the
    requested steps with every evaluation row and tensorboard event file kept."""
    total = 2048
    argv = [sys.executable, str(REPO / "train_rl.py"), *TINY, "--log-dir", str(tmp_path), "-n", str(total)]
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run = tmp_path / "TMaze-v0__ppo-gtrxl__0"
    deadline = time.time() + 120
    while time.time() < deadline and len(list((run / "checkpoints").glob("model_*_steps.zip"))) < 2:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (run / "summary.json").exists(), "the run finished before it could be killed"
    rows_before = list(csv.DictReader((run / "evaluations.csv").open()))
    events_before = set(run.glob("MemoryPPO_1/events.out.tfevents.*"))
    assert rows_before and events_before

    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", str(total), "--resume"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == total and summary["resumed_from"] >= 64
    steps = [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())]
    assert steps == list(range(64, total + 1, 64))
    assert events_before <= set(run.glob("MemoryPPO_1/events.out.tfevents.*")), "resumed in the same tensorboard run"
    assert not list(run.glob("MemoryPPO_2"))


def test_resume_accepts_the_same_configuration_with_a_schedule(tmp_path):
    schedule = ["-p", "ppo.learning_rate=lin_1e-3_1e-4", "--eval-freq", "0"]
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "64", *schedule]) == 0
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "128", "--resume", *schedule]) == 0


def test_resume_refuses_a_changed_configuration(tmp_path, capsys):
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0"]) == 0
    code = train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "128", "--resume", "-p", "gtrxl.d_model=32"])
    assert code == 2 and "differs" in capsys.readouterr().err


def test_resume_ignores_other_backbones_sections_and_a_moved_run(tmp_path):
    """A task config that gains a section for another backbone or learner still resumes its runs, and so
    does a run directory copied elsewhere (mutation caught: comparing every section)."""
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "a"), "-n", "64"]) == 0
    run = next((tmp_path / "a").iterdir())
    shutil.copytree(run, tmp_path / "b" / run.name)
    (tmp_path / "task.yaml").write_text(yaml.safe_dump({"lstm": {"hidden_size": 8}, "vmpo": {"n_steps": 8}}))
    others = ["--config", str(tmp_path / "task.yaml")]
    assert train_rl.main([*TINY, "--log-dir", str(tmp_path / "b"), "-n", "128", "--resume", *others]) == 0


def test_non_finite_training_exits_3_and_keeps_checkpoints(tmp_path, capsys):
    code = train_rl.main([*TINY, "--log-dir", str(tmp_path), "-n", "4096", "-p", "ppo.learning_rate=1e30",
                          "ppo.max_grad_norm=1e30"])
    assert code == 3
    assert "non-finite" in capsys.readouterr().err
    run = tmp_path / "TMaze-v0__ppo-gtrxl__0"
    assert not (run / "summary.json").exists() and not (run / "model.zip").exists()


def test_init_from_starts_from_the_saved_policy_weights(tmp_path, capsys):
    """With a learning rate of 0 the run keeps the weights it started from: those of the source
    run (another seed), not a fresh initialisation; a missing or mismatched source exits 2."""
    assert train_rl.main([*TINY, "-n", "64", "--log-dir", str(tmp_path / "source"), "--threads", "1"]) == 0
    (source,) = (tmp_path / "source").glob("TMaze-v0__*")
    argv = [*TINY, "-n", "64", "--seed", "1", "--threads", "1", "-p", "ppo.learning_rate=0.0"]
    assert train_rl.main([*argv, "--log-dir", str(tmp_path / "warm"), "-p", f"init_from={source}"]) == 0
    (warm,) = (tmp_path / "warm").glob("TMaze-v0__*")
    before = MemoryPPO.load(source / "model.zip").policy.state_dict()
    after = MemoryPPO.load(warm / "model.zip").policy.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert yaml.safe_load((warm / "config.yaml").read_text())["init_from"] == str(source)
    capsys.readouterr()
    assert train_rl.main([*argv, "--log-dir", str(tmp_path / "missing"), "-p", f"init_from={tmp_path}/none"]) == 2
    assert f"init_from='{tmp_path}/none': no saved model there" in capsys.readouterr().err
    wider = [*argv, "--log-dir", str(tmp_path / "wider"), "-p", f"init_from={source}", "gtrxl.d_model=32"]
    assert train_rl.main(wider) == 2
    assert "holds a policy of another architecture" in capsys.readouterr().err


def test_a_run_on_torch_tasks_scores_as_the_same_run_on_numpy_ones(tmp_path):
    """`--vec-env torch` trains on the task's torch twin (here on the CPU) and scores on its numpy one: every
    evaluation equals the same run's with `--vec-env dummy`, and the config records how the copies were stepped."""
    scores = {}
    for vec_env in ("torch", "dummy"):
        assert train_rl.main([*TINY, "--log-dir", str(tmp_path / vec_env), "-n", "192", "--vec-env", vec_env]) == 0
        run = tmp_path / vec_env / "TMaze-v0__ppo-gtrxl__0"
        assert f"vec_env: {vec_env}" in (run / "config.yaml").read_text()
        with (run / "evaluations.csv").open() as rows:
            scores[vec_env] = [{k: v for k, v in row.items() if k != "wall_seconds"} for row in csv.DictReader(rows)]
    assert len(scores["torch"]) == 3 and scores["torch"] == scores["dummy"]


def test_torch_copies_of_a_task_without_a_torch_twin_are_refused_before_anything_is_made(tmp_path, capsys):
    assert train_rl.main(["--env", "CartPole-v1", "--vec-env", "torch", "--log-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (
        "error: vec_env='torch': env='CartPole-v1' has no torch implementation; expected one of TMaze-v0, "
        "TMazeActive-v0, MemoryChain-v0, RepeatFirst-v0, RepeatPrevious-v0, CountRecall-v0 (or vec_env dummy or "
        "subproc)\n")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("override", ["log_dir=", "ppo.gamma=", "gtrxl.d_head="])
def test_an_override_with_no_value_is_named_as_typed(override, capsys):
    assert train_rl.main(["--env", "TMaze-v0", "-p", override, "-n", "32"]) == 2
    assert f"{override}''" in capsys.readouterr().err
