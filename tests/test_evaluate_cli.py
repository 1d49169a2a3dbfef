"""``train_rl.py evaluate``: a trained run scores what its final evaluation scored (same seeds and episodes,
same numbers), names the model it scored, scores elsewhere with --env-kwargs or --env (from that env's
hyper-parameter entry), writes a new JSON each time, and records playable videos."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import imageio.v2 as imageio
import pytest

import train_rl
from experiments import replay

TINY = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "4", "--eval-freq", "64",
        "--n-eval-episodes", "8", "--checkpoint-freq", "0", "--threads", "1",
        "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4",
        "gtrxl.memory_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2", "n_eval_envs=2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny run of 320 steps whose evaluation env served five evaluations before the final one."""
    log_dir = tmp_path_factory.mktemp("runs")
    assert train_rl.main([*TINY, "-n", "320", "--log-dir", str(log_dir)]) == 0
    return log_dir / "TMaze-v0__ppo-gtrxl__0"


def evaluate(argv: list[str], capsys) -> tuple[int, str, str]:
    code = train_rl.main(["evaluate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def written(out: str) -> dict:
    path = next(line.split("written: ")[1] for line in out.splitlines() if "written: " in line)
    return json.loads(Path(path).read_text())


def test_scores_what_the_runs_final_evaluation_scored(run, capsys):
    summary = json.loads((run / "summary.json").read_text())
    code, out, _ = evaluate([str(run)], capsys)
    assert code == 0
    result = written(out)
    assert (result["episodes"], result["seed"], result["n_envs"]) == (8, 10_000, 2)
    assert result["deterministic"]["mean_return"] == summary["final_mean_return"]
    assert result["deterministic"]["std_return"] == summary["final_std_return"]
    assert result["deterministic"]["success_rate"] == summary["final_success_rate"]
    assert f"return {summary['final_mean_return']:.3f} ± {summary['final_std_return']:.3f}" in out
    assert len(result["deterministic"]["returns"]) == 8 and "stochastic" not in result


def test_each_evaluation_writes_a_new_json_beside_the_run(run, capsys, monkeypatch):
    monkeypatch.setattr(replay.time, "strftime", lambda fmt, *args: "20260101-000000")  # both in one second
    before = set(run.glob("evaluate_*.json"))
    for _ in range(2):
        assert evaluate([str(run), "--episodes", "2", "--both"], capsys)[0] == 0
    new = set(run.glob("evaluate_*.json")) - before
    assert len(new) == 2
    for path in new:
        result = json.loads(path.read_text())
        assert len(result["deterministic"]["returns"]) == len(result["stochastic"]["returns"]) == 2


def test_env_kwargs_score_it_on_a_longer_corridor(run, capsys):
    code, out, _ = evaluate([str(run / "best_model.zip"), "--env-kwargs", "length=6", "--episodes", "4",
                             "--stochastic"], capsys)
    assert code == 0
    result = written(out)
    assert result["env_kwargs"] == {"length": 6} and result["model"].endswith("best_model.zip")
    assert result["stochastic"]["mean_length"] == 7.0  # T-Maze episodes last length + 1 steps


def test_names_the_model_it_scored_and_its_step(run, capsys):
    """The final model.zip, or best_model.zip (SB3's EvalCallback's) with the evaluation that chose it."""
    final_steps = json.loads((run / "summary.json").read_text())["env_steps"]
    code, out, _ = evaluate([str(run), "--episodes", "2"], capsys)
    assert code == 0 and f"  model:         the final model (model.zip), saved at {final_steps:,} steps\n" in out
    assert (written(out)["model_kind"], written(out)["model_timesteps"]) == ("final", final_steps)
    best = json.loads((run / "best_model.json").read_text())
    code, out, _ = evaluate([str(run / "best_model.zip"), "--episodes", "2"], capsys)
    assert code == 0 and (f"  model:         the best evaluation's model (best_model.zip), saved at "
                          f"{best['timesteps']:,} steps (the evaluation at {best['timesteps']:,} steps") in out
    assert (written(out)["model_kind"], written(out)["model_timesteps"]) == ("best", best["timesteps"])


def test_another_env_starts_from_its_hyperparameter_entry(run, tmp_path, capsys):
    """--env takes the env settings of its entry, as training would (here a corridor of 5 instead of none)."""
    file = tmp_path / "hyperparams.yml"
    file.write_text("TMaze-v0:\n  env_kwargs: {length: 5}\n  n_envs: 2\n")
    code, out, err = evaluate([str(run), "--env", "TMaze-v0", "--hyperparams", str(file), "--episodes", "2"], capsys)
    assert code == 0 and f"hyperparams: {file}#TMaze-v0 applies" in err
    result = written(out)
    assert result["env_kwargs"] == {"length": 5} and result["hyperparams"] == f"{file}#TMaze-v0"
    code, out, err = evaluate([str(run), "--env", "TMaze-v0", "--hyperparams", "none", "--episodes", "2"], capsys)
    assert code == 0 and "hyperparams" not in err and written(out)["env_kwargs"] == {}


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_records_a_playable_video(suffix, run, tmp_path, capsys):
    video = tmp_path / f"episode{suffix}"
    code, out, _ = evaluate([str(run), "--episodes", "2", "--record", str(video), "--record-episodes", "2"], capsys)
    assert code == 0 and "10 frames, 2 episode(s)" in out  # per episode a start frame, then 4 steps
    if suffix == ".gif":
        frames = imageio.mimread(video)
        count, first = len(frames), frames[0]  # Pillow merges identical consecutive frames
    else:
        reader = imageio.get_reader(video)
        count, first = reader.count_frames(), reader.get_data(0)
        assert count == 10
    assert count > 0 and min(first.shape[:2]) >= 128


def test_render_prints_the_episode(run, capsys):
    code, out, _ = evaluate([str(run), "--episodes", "1", "--render", "--fps", "1000"], capsys)
    assert code == 0 and "t=0/4" in out and "t=4/4" in out  # the last step is shown too


@pytest.mark.parametrize("argv,message", [
    (["--record", "x.avi"], "--record 'x.avi': unknown video format '.avi'; valid formats: .gif, .mp4"),
    (["--episodes", "0"], "--episodes=0: expected an integer >= 1"),
    (["--env-kwargs", "lenght=5"], "unexpected keyword argument(s) 'lenght' (did you mean 'length'?)"),
    (["--env", "TMaze-v9"], "Unknown env id 'TMaze-v9'"),
])
def test_bad_input_exits_2_naming_it(argv, message, run, capsys):
    code, _, err = evaluate([str(run), *argv], capsys)
    assert code == 2 and message in err


def test_a_path_without_a_model_exits_2(tmp_path, capsys):
    code, _, err = evaluate([str(tmp_path)], capsys)
    assert code == 2 and "holds no model.zip" in err


def test_a_vmpo_run_is_loaded_with_vmpo(tmp_path, capsys):
    argv = [*TINY[:TINY.index("-p")], "--algo", "vmpo", "--backbone", "mlp", "-n", "64", "--eval-freq", "0",
            "--log-dir", str(tmp_path), "-p", "vmpo.n_steps=16", "vmpo.batch_size=32", "vmpo.segment_length=4",
            "n_eval_envs=2"]
    assert train_rl.main(argv) == 0
    run = tmp_path / "TMaze-v0__vmpo-mlp__0"
    code, out, _ = evaluate([str(run)], capsys)
    assert code == 0 and "(VMPO, mlp, 64 steps)" in out
    assert written(out)["deterministic"]["mean_return"] == json.loads((run / "summary.json").read_text())[
        "final_mean_return"]


def test_a_lone_model_is_named_by_its_own_learner_and_backbone(tmp_path, capsys):
    argv = [*TINY[:TINY.index("-p")], "--algo", "vmpo", "--backbone", "gru", "-n", "64", "--eval-freq", "0",
            "--log-dir", str(tmp_path), "-p", "vmpo.n_steps=16", "vmpo.batch_size=32", "vmpo.segment_length=4",
            "n_eval_envs=2"]
    assert train_rl.main(argv) == 0
    lone = tmp_path / "lone" / "m.zip"
    lone.parent.mkdir()
    shutil.copy(tmp_path / "TMaze-v0__vmpo-gru__0" / "model.zip", lone)
    code, out, _ = evaluate([str(lone), "--env", "TMaze-v0", "--env-kwargs", "length=3", "--episodes", "2"], capsys)
    assert code == 0 and "(VMPO, gru, 64 steps)" in out, out
    assert written(out)["backbone"] == "gru" and written(out)["algo"] == "vmpo"


def test_evaluate_refuses_more_env_copies_than_memory_holds(run, capsys):
    code, _, err = evaluate([str(run), "--n-envs", "100000000", "--episodes", "1"], capsys)
    assert code == 2 and err.startswith("error: --n-envs=100000000: 100,000,000 env copies would need about "), err


def test_a_run_of_the_other_kind_is_named_with_the_command_that_reads_it(tmp_path, capsys):
    """`evaluate` and `inspect` given a language-model run, `lm eval` and `lm sample` given a training run: exit 2
    naming the command that reads it."""
    lm = ["lm", "train", "-p", f"log_dir={tmp_path}", "data=copy", "steps=2", "segment_length=8", "batch_size=2",
          "copy_tokens=2000", "backbone_options.d_model=16", "backbone_options.n_heads=2",
          "backbone_options.n_layers=1", "backbone_options.memory_length=8", "eval_segments=1"]
    assert train_rl.main(lm) == 0
    (lm_run,) = tmp_path.glob("copy__lm-*")
    rl_run = tmp_path / "TMaze-v0__ppo-gtrxl__0"
    (rl_run / "checkpoints").mkdir(parents=True)
    (rl_run / "config.yaml").write_text("algo: ppo\nbackbone: gtrxl\nenv: TMaze-v0\n")
    capsys.readouterr()
    for argv, reader in ((["evaluate", str(lm_run)], "lm eval"), (["inspect", str(lm_run)], "lm eval"),
                         (["lm", "eval", str(rl_run)], "evaluate"), (["lm", "sample", str(rl_run)], "evaluate")):
        assert train_rl.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"`{reader} " in err, err


@pytest.mark.parametrize(("edit", "message"), [
    (("algo: ppo", "algo: dqn"), "config.yaml': algo='dqn': expected one of ppo, vmpo"),
    (("algo: ppo", "algo: vmpo"), "config.yaml': algo='vmpo', but "),
    (("n_envs: 4", "n_envs: 0"), "config.yaml': n_envs=0: expected an integer >= 1"),
])
@pytest.mark.parametrize("command", ["evaluate", "inspect"])
def test_a_run_config_edited_since_training_is_named_by_the_commands_that_read_it(edit, message, command, run,
                                                                                  tmp_path, capsys):
    edited = tmp_path / run.name
    shutil.copytree(run, edited)
    text = (edited / "config.yaml").read_text()
    assert edit[0] in text
    (edited / "config.yaml").write_text(text.replace(edit[0], edit[1], 1))
    assert train_rl.main([command, str(edited), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
