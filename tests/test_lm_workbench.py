"""The LM workbench: data with no download, segment streaming, training with checkpoints and resume,
evaluation with a longer memory than training, and memory that matters on the copy task."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from tensorboard.compat.proto.event_pb2 import Event

import lm.workbench
import train_rl
from experiments.config import ConfigError
from experiments.run_dir import CHECKPOINTS, SUMMARY_FILE, read_records
from experiments.training import torch_threads
from lm.data import copy_task, python_corpus, python_sources, segments
from lm.workbench import bits_per_token, build_lm_config, load_run, train_lm

REPO = Path(__file__).resolve().parents[1]


def test_python_corpus_splits_are_fixed_and_disjoint():
    """Every tenth standard-library file is validation; documents start at file boundaries."""
    files = python_sources()
    assert len(files) > 100 and files == python_sources()
    train, valid = python_corpus("train", 50_000), python_corpus("validation", 50_000)
    assert len(train) == len(valid) == 50_000 and train.vocab_size == 256
    first_train = files[1].read_bytes()
    assert bytes(train.tokens[:len(first_train)].tolist())[:1000] == first_train[:1000]
    assert bytes(valid.tokens[:1000].tolist()) == files[0].read_bytes()[:1000]
    assert train.starts[0] and train.starts[len(first_train)]
    assert int(train.starts.sum()) >= 2


def test_segments_overlap_by_one_token_and_restart_rows_with_a_document_start():
    stream = copy_task(100, vocab_size=8, distance=5, seed=0)
    batches = segments(stream, batch_size=2, segment_length=7)
    rows = stream.tokens.view(2, 50).T
    first, second = next(batches), next(batches)
    assert torch.equal(first[0], rows[:8]) and torch.equal(second[0], rows[7:15])
    assert first[1][0].all() and not second[1][0].any()
    for _ in range(6):  # 7 segments per pass over rows of 50 tokens
        tokens, starts, scored = next(batches)
    assert torch.equal(tokens, rows[:8]) and starts[0].all() and scored.all()


def test_copy_task_repeats_every_block_once():
    stream = copy_task(40, vocab_size=5, distance=4, seed=3)
    blocks = stream.tokens.view(5, 2, 4)
    assert torch.equal(blocks[:, 0], blocks[:, 1]) and int(stream.tokens.min()) >= 1


def copy_config(tmp_path: Path, memory_length: int, steps: int = 150, **extra: object):
    return build_lm_config(None, [
        "data=copy", "backbone=trxl-i", f"log_dir={tmp_path}", f"steps={steps}", "segment_length=8",
        "batch_size=16", "eval_every=50", "checkpoint_every=50", "eval_segments=8", "learning_rate=3e-3",
        "copy_vocab=8", "copy_distance=12", "copy_tokens=20000", "d_embed=32", "max_grad_norm=1.0",
        "backbone_options.d_model=32", "backbone_options.n_heads=2", "backbone_options.n_layers=1",
        f"backbone_options.memory_length={memory_length}", *[f"{k}={v}" for k, v in extra.items()]])


@pytest.mark.slow  # long: run by make test-slow
def test_memory_matters_on_the_copy_task(tmp_path):
    """A copy 12 tokens back, same budget: with memory 16 the model learns the copies (measured 2.30 bits
    after 300 segments), with memory 4 it stays at chance (2.84); half the tokens are random, so chance
    is log2(7) = 2.81 bits and perfect copying half of that."""
    chance = math.log2(7)
    with_memory = train_lm(copy_config(tmp_path / "long", 16, steps=300))["valid_bits_per_token"]
    without = train_lm(copy_config(tmp_path / "short", 4, steps=300))["valid_bits_per_token"]
    assert with_memory < 0.9 * chance, with_memory
    assert without > 0.97 * chance, without


def test_resume_continues_from_the_checkpoint_and_eval_takes_a_longer_memory(tmp_path, capsys):
    config = copy_config(tmp_path, 16, steps=50)
    train_lm(config)
    longer = copy_config(tmp_path, 16, steps=100)
    with pytest.raises(ConfigError, match="--resume"):
        train_lm(longer)
    summary = train_lm(longer, resume=True)
    assert summary["steps_per_second"] > 0 and summary["torch_threads"] == torch_threads(longer.threads)
    steps = [int(row["step"]) for row in csv.DictReader((config.directory() / "evaluations.csv").open())]
    assert steps == [50, 100]
    _, model = load_run(config.directory(), memory_length=48)
    assert model.backbone.memory_length == 48
    assert bits_per_token(model, config.stream("validation"), config, 4) < math.log2(8)
    assert train_rl.main(["lm", "eval", str(config.directory()), "--memory-length", "16", "48"]) == 0
    assert "memory_length 48:" in capsys.readouterr().out
    assert train_rl.main(["lm", "eval", str(config.directory()), "--knn-weight", "0.25", "--knn-k", "4",
                          "--datastore-segments", "8"]) == 0
    assert "kNN-LM λ = 0.25 (k = 4, datastore of 1,024 tokens):" in capsys.readouterr().out
    assert train_rl.main(["lm", "eval", str(config.directory()), "--knn-weight", "2"]) == 2
    assert "--knn-weight[0]=2.0: expected a number in [0, 1]" in capsys.readouterr().err


def test_bad_settings_name_the_valid_choices(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"data='wiki': expected one of python, copy"):
        build_lm_config(None, ["data=wiki"])
    with pytest.raises(ConfigError, match="'stepz'.*valid: .*steps"):
        build_lm_config(None, ["stepz=3"])
    assert train_rl.main(["lm", "eval", str(tmp_path)]) == 2
    assert "not an LM run directory" in capsys.readouterr().err


def test_shipped_lm_configs_are_valid():
    configs = sorted((REPO / "configs" / "lm").glob("*.yaml"))
    assert configs
    for path in configs:
        build_lm_config(path)


@pytest.mark.slow  # long: run by make test-slow
def test_lm_benchmark_writes_every_cell_and_reads_finished_runs_back(tmp_path):
    """``benchmarks/lm_memory.py --quick``: a curve and an evaluation-memory row per cell; run again over the
    same log directory it reads the finished runs instead of training them (mutation caught: retraining
    a finished run, which fails because its directory already holds a run)."""
    command = [sys.executable, str(REPO / "benchmarks" / "lm_memory.py"), "--quick", "--workers", "1",
               "--out", str(tmp_path), "--log-dir", str(tmp_path / "runs")]
    for _ in range(2):
        subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    result = json.loads((tmp_path / "lm.json").read_text())
    assert [cell["memory_length"] for cell in result["cells"]] == [16, 4]
    assert all(len(cell["curve"]) == 2 and cell["final_bits"] > 0 for cell in result["cells"])
    assert set(result["cells"][0]["eval_memory"]) == {"8", "32"} and "eval_memory" not in result["cells"][1]
    assert "| trxl | relative | 16 |" in (tmp_path / "lm.md").read_text()


def test_eval_with_a_memory_length_the_weights_depend_on_names_them(tmp_path, capsys):
    """Linformer's projections have ``memory_length + 1`` columns, so its weights cannot be evaluated with
    another memory: a clear error naming the parameters, not torch's size-mismatch trace (mutation caught:
    loading without the shape check raises a RuntimeError)."""
    config = copy_config(tmp_path, 8, steps=2, **{"backbone_options.attention": "linformer"})
    train_lm(config)
    with pytest.raises(ConfigError, match=r"do not fit \{'memory_length': 16\}: .*key_projection"):
        load_run(config.directory(), memory_length=16)
    assert train_rl.main(["lm", "eval", str(config.directory()), "--memory-length", "16"]) == 2
    assert "do not fit" in capsys.readouterr().err


def test_a_checkpoint_of_another_model_names_the_weights_that_do_not_fit(tmp_path, capsys):
    """A checkpoint whose shapes differ from the model the run's config.yaml describes (another embedding width):
    the message names each weight with both shapes."""
    small, large = copy_config(tmp_path / "a", 8, steps=1), copy_config(tmp_path / "b", 8, steps=1, d_embed=16)
    train_lm(small)
    train_lm(large)
    for checkpoint in large.directory().glob("checkpoints/lm_*.pt"):
        shutil.copy(next(small.directory().glob("checkpoints/lm_*.pt")), checkpoint)
    assert train_rl.main(["lm", "eval", str(large.directory())]) == 2
    err = capsys.readouterr().err
    assert "do not fit the model its config.yaml describes: " in err and "{}" not in err


def test_eval_with_early_exits_reports_bits_and_layers(tmp_path, capsys):
    """``intermediate_fade=false`` keeps training the exits; at confidence 1 no position of this barely trained
    model leaves early and the bits are the plain evaluation's, at 1e-9 every position leaves after the first
    layer."""
    config = copy_config(tmp_path, 16, steps=30, intermediate_weight=0.5, intermediate_fade=False,
                         **{"backbone_options.n_layers": 2})
    train_lm(config)
    assert train_rl.main(["lm", "eval", str(config.directory()), "--segments", "4",
                          "--exit-threshold", "1", "1e-9"]) == 0
    lines = capsys.readouterr().out.splitlines()
    plain = lines[0].split(": ")[1].split(" bits")[0]
    assert lines[1] == (f"memory_length 16, early exits at confidence 1.0: {plain} bits per token, "
                        "2.00 of 2 layers per token")
    assert lines[2].startswith("memory_length 16, early exits at confidence 1e-09: ") and "1.00 of 2 layers" in lines[2]


def test_an_lm_run_has_the_run_cores_guarantees(tmp_path, monkeypatch):
    """The LM run directory is the run core's: a second writer is refused while the lock is held, every file is
    written through :mod:`envs.atomic` (fsync, then rename; mutation caught: a bare ``torch.save`` or
    ``write_text``), and a new run never overwrites one (mutation caught: no refusal)."""
    from envs import atomic
    from experiments.run_dir import RunDirectory

    config = copy_config(tmp_path, 4, steps=4)
    run = RunDirectory(config.directory())
    with run.lock(), pytest.raises(ConfigError, match="is being written by process"):
        train_lm(config)
    assert sorted(p.name for p in run.path.iterdir()) == ["run.lock"]

    synced, fsynced = [], []
    replace_synced, fsync = atomic.replace_synced, atomic.os.fsync
    monkeypatch.setattr(atomic, "replace_synced", lambda tmp, path: (synced.append(path), replace_synced(tmp, path)))
    monkeypatch.setattr(atomic.os, "fsync", lambda handle: (fsynced.append(handle), fsync(handle)))
    train_lm(config)
    written = {p.relative_to(run.path).as_posix() for p in run.path.rglob("*")
               if p.is_file() and "tfevents" not in p.name and p.name != "run.lock"}
    assert written == {"config.yaml", "evaluations.csv", "checkpoints/lm_4.pt", "summary.json"}
    assert {p.relative_to(run.path).as_posix() for p in synced} == written
    assert len(fsynced) >= 2 * len(synced)  # each file, then its directory

    before = {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"already holds a run; pass --resume to continue it or choose another "
                                          r"-p log_dir=\.\.\. or seed=\.\.\.$"):
        train_lm(config)
    assert {p: p.read_bytes() for p in run.path.rglob("*") if p.is_file()} == before


def test_a_resume_logs_each_step_to_tensorboard_once(tmp_path):
    """Steps logged after the checkpoint a resume starts from are dropped before they are logged again (mutation
    caught: `lm train --resume` left every such step's scalars twice in tensorboard)."""
    config = copy_config(tmp_path, 4, steps=20, checkpoint_every=10, eval_every=10)
    train_lm(config)
    run = config.directory()
    checkpoints = sorted((run / CHECKPOINTS).iterdir())
    checkpoints[-1].unlink()  # as if killed after step 20 was logged, before its checkpoint was written
    (run / SUMMARY_FILE).unlink()
    train_lm(config, resume=True)
    logged = [(event.step, value.tag) for path in run.rglob("events.out.tfevents.*") for record in read_records(path)
              if (event := Event.FromString(record)).HasField("summary") for value in event.summary.value]
    assert len(logged) == len(set(logged)) and (20, "train/loss") in logged


def test_the_wall_seconds_of_a_resumed_run_go_on_from_its_checkpoint(tmp_path, monkeypatch):
    """`evaluations.csv`'s clock counts the seconds of every session, as an RL run's does (a resume restarted it
    from 0). The workbench's clock is one that moves a second per reading."""
    readings = iter(range(10**6))
    monkeypatch.setattr(lm.workbench, "time", types.SimpleNamespace(time=lambda: float(next(readings))))
    config = copy_config(tmp_path, 4, steps=20, checkpoint_every=10, eval_every=10)
    train_lm(config)
    run = config.directory()
    sorted((run / CHECKPOINTS).iterdir())[-1].unlink()  # killed before the last checkpoint: resumed from step 10
    (run / SUMMARY_FILE).unlink()
    train_lm(config, resume=True)
    walls = [float(row["wall_seconds"]) for row in csv.DictReader((run / "evaluations.csv").open())]
    assert len(walls) == 2 and walls[1] > walls[0]
