"""The language-model workbench: train, evaluate and sample the LM variants of the memory backbones.

`python train_rl.py lm train|eval|sample` (see `main`). A run lives in
`{log_dir}/{data}__lm-{backbone}__{seed}/`, laid out like an RL run:

- `config.yaml`: the resolved `LMConfig`;
- `events.out.tfevents.*`: tensorboard (training loss, validation bits per token);
- `evaluations.csv`: step, training loss (nats; with `future_targets`, the multiple-targets
  loss of Al-Rfou et al. 2019 included), validation bits per token (next token only), wall seconds;
  both over the stream's scored tokens (every token, but only the answers of associative recall);
- `checkpoints/lm_<step>.pt`: model, optimizer, the memory carried between segments and the
  step, written atomically, so `--resume` continues exactly where a run stopped;
- `summary.json` at the end.

Training follows Transformer-XL (Dai et al. 2019): `batch_size` parallel rows of the stream
are read segment by segment, each segment attending to the memory the previous one left
(detached). Evaluation may use a longer memory than training: the position schemes have no
parameter that depends on the memory length, so the trained weights load into a model with
another `memory_length` (Linformer's projections do depend on it: `load_run` refuses such a run
and names them).
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import io
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from experiments.cli.parser import OneLineParser, program
from experiments.config import SEED_LIMIT, ConfigError, coerce, field_default, load_yaml, parse_override
from experiments.config_files import config_path
from experiments.exits import advise_on_signal
from experiments.rules import Directory
from experiments.run_dir import (
    CHECKPOINTS,
    CONFIG_FILE,
    EVALUATIONS_FILE,
    SUMMARY_FILE,
    RunBusyError,
    RunDirectory,
    notify,
)
from experiments.training import torch_threads
from lm.data import DATASETS, TokenStream, make_stream, segments
from policies import BACKBONES
from policies.lm.knn import Datastore, knn_lm_loss, segment_keys
from policies.lm.model import MemoryLanguageModel, scored_mean
from policies.lm.spalm import GatedRetrieval, spalm_log_probs, spalm_loss
from policies.options import check_options
from policies.rules import Device, Entries, Flag, Items, OneOf, Range, Rule, Text, one_line, short
from policies.window import State

CHECKPOINT_PREFIX = "lm_"
EVAL_COLUMNS = ["step", "train_loss", "valid_bits_per_token", "wall_seconds"]


def _setting(rule: Rule, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A field of `LMConfig` whose valid values `rule` declares (`check_lm_config`)."""
    return field(default=default, metadata={"rule": rule}, **kwargs)


COUNT = Range(1, integer=True)
NON_NEGATIVE = Range(0.0)


@dataclass
class LMConfig:
    """Settings of one language-model run (YAML keys and `-p key=value` overrides); each field declares the
    rule of its valid values (`policies.rules`), checked by `check_lm_config`."""

    data: str = _setting(OneOf(lambda: DATASETS), "python")
    backbone: str = _setting(OneOf(lambda: BACKBONES), "trxl")
    backbone_options: dict[str, Any] = _setting(Entries(optional=False), default_factory=lambda: {
        "d_model": 128, "n_layers": 2, "n_heads": 4, "memory_length": 128})
    d_embed: int = _setting(COUNT, 64)
    future_targets: int = _setting(Range(0, integer=True), 0)
    future_weight: float = _setting(NON_NEGATIVE, 0.5)
    intermediate_weight: float = _setting(NON_NEGATIVE, 0.0)
    intermediate_fade: bool = _setting(Flag(), True)
    segment_length: int = _setting(COUNT, 64)
    batch_size: int = _setting(COUNT, 16)
    steps: int = _setting(COUNT, 2000)
    learning_rate: float = _setting(Range(0.0, low_open=True), 5e-4)
    max_grad_norm: float = _setting(Range(0.0, low_open=True), 0.25)
    eval_every: int = _setting(COUNT, 250)
    eval_segments: int = _setting(COUNT, 32)
    checkpoint_every: int = _setting(COUNT, 250)
    seed: int = _setting(Range(0, SEED_LIMIT, integer=True), 0)
    threads: int = _setting(Range(0, integer=True, note="0: every core"), 0)
    device: str = _setting(Device(), "cpu")
    log_dir: str = _setting(Directory(), "runs/lm")
    max_bytes: int = _setting(COUNT, 4_000_000)
    copy_tokens: int = _setting(COUNT, 200_000)
    copy_vocab: int = _setting(Range(2, integer=True), 16)
    copy_distance: int = _setting(COUNT, 64)
    recall_tokens: int = _setting(COUNT, 200_000)
    recall_vocab: int = _setting(Range(3, integer=True), 32)
    recall_pairs: int = _setting(COUNT, 8)

    def run_name(self) -> str:
        return f"{self.data}__lm-{self.backbone}__{self.seed}"

    def directory(self) -> Path:
        return Path(self.log_dir) / self.run_name()

    def run(self) -> RunDirectory:
        """The run's directory, its checkpoints `checkpoints/lm_<step>.pt`."""
        return lm_run(self.directory())

    def stream(self, split: str) -> TokenStream:
        recall = self.data == "associative-recall"
        return make_stream(self.data, split, max_bytes=self.max_bytes,
                           n_tokens=self.recall_tokens if recall else self.copy_tokens,
                           vocab_size=self.recall_vocab if recall else self.copy_vocab,
                           distance=self.copy_distance, n_pairs=self.recall_pairs, seed=self.seed)


FIELDS = {f.name: f for f in dataclasses.fields(LMConfig)}
RESUMABLE = ("steps", "device", "threads", "log_dir", "eval_every", "eval_segments", "checkpoint_every")
"""settings a resumed run may change: its budget, where and how fast it runs, how often it reports"""


def build_lm_config(file: str | Path | None = None, overrides: list[str] | None = None) -> LMConfig:
    """A config from defaults, a YAML file, then `key=value` overrides (`backbone_options.d_model=64`), checked
    by `check_lm_config`.

    Raises:
        ConfigError: an unknown key, or a value of the wrong type or outside its rule; one line naming the key, the
            value and what is valid.
    """
    values: dict[str, Any] = {}
    for key, value in (load_yaml(file) if file else {}).items():
        values[key] = value
    for text in overrides or []:
        key, value = parse_override(text)
        head, _, rest = key.partition(".")
        if rest and head == "backbone_options":
            options = values.get("backbone_options", LMConfig().backbone_options)
            values["backbone_options"] = {**(options if isinstance(options, dict) else {}), rest: value}
        else:
            values[key] = value
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"unknown LM setting(s) {', '.join(short(repr(key)) for key in unknown)}; valid: "
                          f"{', '.join(sorted(FIELDS))}")
    config = LMConfig(**{key: coerce(key, value, field_default(FIELDS[key])) for key, value in values.items()})
    if config.backbone in BACKBONES:  # each option it takes as the type of its default (an unknown one: refused next)
        defaults = BACKBONES[config.backbone].options()
        config.backbone_options = {
            key: coerce(f"backbone_options.{key}", value, defaults[key]) if defaults.get(key) is not None else value
            for key, value in config.backbone_options.items()}
    check_lm_config(config)
    return config


def check_lm_config(config: LMConfig) -> None:
    """Refuse `config` (`ConfigError`, one line naming the key, the value and what is valid) where a setting
    breaks its rule, a backbone option is unknown or refused by the backbone's own rules, or the
    model, the synthetic data or its segments cannot be made; before anything is created. The model is built on
    PyTorch's `meta` device: every constructor check runs, no storage is allocated."""
    for spec in dataclasses.fields(LMConfig):
        spec.metadata["rule"].check(spec.name, getattr(config, spec.name))
    valid = BACKBONES[config.backbone].options()
    unknown = [key for key in config.backbone_options if key not in valid]
    if unknown:
        raise ConfigError(f"unknown option {short(repr(unknown[0]))} in backbone_options of {config.backbone}; valid "
                          f"options: {', '.join(valid)}")
    check_options(BACKBONES[config.backbone].cls.__init__, config.backbone_options, prefix="backbone_options.")
    try:
        with torch.device("meta"):
            MemoryLanguageModel(2, config.backbone, config.d_embed, config.future_targets, **config.backbone_options)
    except Exception as error:  # a constructor's own check, named with the options it was given
        raise ConfigError(f"backbone={config.backbone} with backbone_options {short(repr(config.backbone_options))}: "
                          f"{one_line(error)}") from None
    if config.data != "python":  # synthetic data is made in milliseconds: its own checks run now
        try:
            batches = segments(config.stream("validation"), config.batch_size, config.segment_length)
            scored = sum(int(next(batches)[2][1:].sum()) for _ in range(config.eval_segments))
        except ValueError as error:
            raise ConfigError(f"data={config.data}: {one_line(error)}") from None
        if not scored:
            raise ConfigError(f"eval_segments={config.eval_segments}: the first {config.eval_segments} validation "
                              f"segments of data={config.data} hold no scored token; expected more segments")


def build_model(config: LMConfig, vocab_size: int, **option_overrides: Any) -> MemoryLanguageModel:
    try:
        return MemoryLanguageModel(vocab_size, config.backbone, config.d_embed, config.future_targets,
                                   **{**config.backbone_options, **option_overrides})
    except ValueError as error:
        raise ConfigError(str(error)) from error


def lm_run(directory: Path) -> RunDirectory:
    """The LM run directory at `directory`."""
    return RunDirectory(directory, CHECKPOINT_PREFIX, ".pt")


def _latest_checkpoint(run: RunDirectory) -> Path | None:
    found = run.latest_checkpoint()
    return None if found is None else found[0]


def _save_checkpoint(run: RunDirectory, step: int, model: MemoryLanguageModel, optimizer: torch.optim.Optimizer,
                     state: State, config: LMConfig) -> None:
    """The model, optimizer, carried memory, step, random state and the run's settings, written whole."""
    saved = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
             "rng": torch.get_rng_state(), "config": dataclasses.asdict(config)}
    run.save(f"{CHECKPOINTS}/{CHECKPOINT_PREFIX}{step}.pt", lambda tmp: torch.save(saved, tmp))


def _load_checkpoint(path: Path, device: str) -> dict[str, Any]:
    """A checkpoint's content; `ConfigError` naming the file when it does not load (truncated, damaged)."""
    try:
        saved = torch.load(path, map_location=device, weights_only=False)
        if not isinstance(saved, dict) or not {"step", "model"} <= set(saved):
            raise ValueError("it holds no LM checkpoint (no step and model)")
    except Exception as error:  # zip, pickle and torch errors alike: the file is unusable
        raise ConfigError(f"checkpoint {str(path)!r} does not load ({type(error).__name__}: "
                          f"{short(str(error), 200)})") from None
    return saved


def _check_same_lm_run(config: LMConfig, saved: dict[str, Any], source: str) -> None:
    """Refuse to resume with settings other than the run's own (`saved`), except those of `RESUMABLE`."""
    current = dataclasses.asdict(config)
    changed = [f"{key} ({short(repr(saved[key]))} in the run, {short(repr(current[key]))} now)"
               for key in sorted(FIELDS) if key not in RESUMABLE and key in saved and saved[key] != current[key]]
    if changed:
        raise ConfigError(f"--resume with settings that differ from {source} in: {', '.join(changed)}")


def _evaluation_rows(log: Path, step: int) -> list[list[str]]:
    """The rows of `evaluations.csv` at steps up to `step` (a resumed run redoes the later ones)."""
    if not log.exists():
        return []
    with log.open(newline="") as handle:
        return [row for row in list(csv.reader(handle))[1:] if row and int(row[0]) <= step]


def _write_evaluations(run: RunDirectory, rows: list[list[str]]) -> None:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([EVAL_COLUMNS, *rows])
    run.write(EVALUATIONS_FILE, text.getvalue())


def evaluation_segments(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int
                        ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """The first `n_segments` `(tokens, starts, scored)` of `stream` on the config's device, read as
    in training, with `model` in evaluation mode until the last one has been used."""
    model.eval()
    batches = segments(stream, config.batch_size, config.segment_length)
    for _ in range(n_segments):
        yield tuple(part.to(config.device) for part in next(batches))
    model.train()


@torch.no_grad()
def bits_per_token(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int,
                   knn: KNNSettings | None = None) -> float:
    """Mean next-token cross-entropy in bits over the scored targets (`TokenStream`) of the first
    `n_segments` segments of `stream`; with `knn`, of the kNN-LM mixture (`policies.knn_lm`).

    Raises:
        ValueError: those segments hold no scored target.
    """

    def segment(tokens: Tensor, state: State, starts: Tensor, scored: Tensor) -> tuple[tuple[Tensor, ...], State]:
        if knn is None:
            loss, state, _ = model.loss(tokens, state, starts, scored=scored)
        else:
            loss, state = knn_lm_loss(model, tokens, state, knn.datastore, knn.k, knn.weight, starts, scored)
        return (loss,), state

    return scored_means(model, stream, config, n_segments, segment)[0] / math.log(2)


@torch.no_grad()
def early_exit_bits(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int,
                    threshold: float) -> tuple[float, float]:
    """Bits per token and mean layers run per token with depth-adaptive exits at confidence `threshold`
    (`policies.lm.MemoryLanguageModel.early_exit_loss`), over the scored targets as `bits_per_token`."""

    def segment(tokens: Tensor, state: State, starts: Tensor, scored: Tensor) -> tuple[tuple[Tensor, ...], State]:
        loss, layers, state = model.early_exit_loss(tokens, state, threshold, starts, scored)
        return (loss, layers), state

    nats, layers = scored_means(model, stream, config, n_segments, segment)
    return nats / math.log(2), layers


def scored_means(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int,
                 segment: Callable[[Tensor, State, Tensor, Tensor], tuple[tuple[Tensor, ...], State]]) -> list[float]:
    """The means over the scored targets of the first `n_segments` segments of `stream` of what
    `segment(tokens, state, starts, scored)` returns per segment (means over its own scored targets),
    the state carried from segment to segment.

    Raises:
        ValueError: those segments hold no scored target.
    """
    state, totals, count = model.initial_state(config.batch_size), None, 0
    for tokens, starts, scored in evaluation_segments(model, stream, config, n_segments):
        values, state = segment(tokens, state, starts, scored)
        n_scored = int(scored[1:].sum())
        weighted = [value.item() * n_scored for value in values]
        totals = weighted if totals is None else [t + w for t, w in zip(totals, weighted, strict=True)]
        count += n_scored
    if count == 0 or totals is None:
        raise ValueError(f"the first {n_segments} evaluation segments hold no scored token; evaluate more segments")
    return [total / count for total in totals]


@dataclass
class KNNSettings:
    """kNN-LM evaluation: the datastore, the neighbours `k` and the interpolation weight `λ`."""

    datastore: Datastore
    k: int
    weight: float


@torch.no_grad()
def build_datastore(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int) -> Datastore:
    """The datastore of the first `n_segments` segments of `stream` (the training split), read as in training."""
    state, keys, values = model.initial_state(config.batch_size), [], []
    for tokens, starts, _ in evaluation_segments(model, stream, config, n_segments):
        segment_entries, next_tokens, state = segment_keys(model, tokens, state, starts)
        keys.append(segment_entries)
        values.append(next_tokens)
    return Datastore(torch.cat(keys), torch.cat(values), model.head.out_features)


@dataclass
class SPALMSettings:
    """SPALM training: the datastore, the neighbours `k` and the gate's learning rate."""

    datastore: Datastore
    k: int
    gate_lr: float


def fine_tune(model: MemoryLanguageModel, stream: TokenStream, config: LMConfig, n_segments: int, first: int,
              lm_lr: float, spalm: SPALMSettings | None = None) -> tuple[GatedRetrieval | None, list[float]]:
    """Train on `n_segments` segments of `stream` from segment `first` on (for SPALM: the training split
    after the datastore's segments), with Adam. With `spalm`: SPALM's gate (`GatedRetrieval`),
    and the LM with it when `lm_lr` > 0 (the paper trains both; 0 keeps the LM frozen). Without: the LM
    alone on the same segments, the control for SPALM's fine-tuning. Returns the gate (`None` without
    `spalm`) and the training losses (nats per scored target).

    Raises:
        ValueError: `n_segments` is below 1, or there is nothing to train.
    """
    if n_segments < 1:
        raise ValueError(f"fine-tuning needs at least 1 training segment, got {n_segments}")
    if spalm is None and lm_lr <= 0:
        raise ValueError(f"nothing to train: no SPALM gate and an LM learning rate of {lm_lr}")
    retrieval, groups = None, []
    if spalm is not None:
        retrieval = GatedRetrieval(model.head.in_features).to(config.device)
        groups.append({"params": list(retrieval.parameters()), "lr": spalm.gate_lr})
    train_lm = lm_lr > 0
    if train_lm:
        groups.append({"params": list(model.parameters()), "lr": lm_lr})
    optimizer = torch.optim.Adam(groups)
    model.train(train_lm).requires_grad_(train_lm)
    state, losses = model.initial_state(config.batch_size), []
    batches = segments(stream, config.batch_size, config.segment_length, first=first)
    for tokens, starts, scored in itertools.islice(batches, n_segments):
        tokens, starts, scored = (part.to(config.device) for part in (tokens, starts, scored))
        with torch.set_grad_enabled(train_lm):
            hidden, targets, state = segment_keys(model, tokens, state, starts)
        if spalm is not None and retrieval is not None:
            log_probs, _ = spalm_log_probs(model, retrieval, hidden, spalm.datastore, spalm.k)
        else:
            log_probs = torch.log_softmax(model.head(hidden), dim=-1)
        loss = scored_mean(F.nll_loss(log_probs, targets, reduction="none"), scored)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train_lm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        model.backbone.invalidate_caches()
        losses.append(loss.item())
    model.train().requires_grad_(True)
    return retrieval, losses


@torch.no_grad()
def spalm_bits(model: MemoryLanguageModel, retrieval: GatedRetrieval, stream: TokenStream, config: LMConfig,
               n_segments: int, datastore: Datastore, k: int) -> tuple[float, float]:
    """Bits per token under SPALM (`spalm_loss`) and the mean gate (its trust in the
    LM), over the scored targets as `bits_per_token`."""

    def segment(tokens: Tensor, state: State, starts: Tensor, scored: Tensor) -> tuple[tuple[Tensor, ...], State]:
        loss, gate, state = spalm_loss(model, retrieval, tokens, state, datastore, k, starts, scored)
        return (loss, gate), state

    nats, gate = scored_means(model, stream, config, n_segments, segment)
    return nats / math.log(2), gate


def train_lm(config: LMConfig, resume: bool = False, progress: bool = False) -> dict[str, Any]:
    """Train (or, with `resume`, continue) the run of `config`; returns its summary.

    The run directory is an `RunDirectory`, with an RL run's guarantees: `config` is
    checked before anything is created, one process writes it (its lock), a new run refuses a directory that holds
    one, and every file is written whole. `resume` continues from the newest checkpoint, with the settings it was
    made with (those of `RESUMABLE` may change), dropping the evaluations after it; one that already reaches
    `steps` changes nothing."""
    check_lm_config(config)
    torch.set_num_threads(torch_threads(config.threads))
    run = config.run()
    try:
        run.check_not_busy()
    except RunBusyError as error:
        raise ConfigError(str(error)) from None
    if not resume:
        _refuse_existing(run)
    checkpoint = _latest_checkpoint(run) if resume else None
    saved = None if checkpoint is None else _load_checkpoint(checkpoint, config.device)
    if saved is not None:
        previous = saved.get("config") or (load_yaml(run / CONFIG_FILE) if (run / CONFIG_FILE).exists() else {})
        _check_same_lm_run(config, previous, f"the run in {str(run.path)!r}")
        summary = run.summary()
        if saved["step"] >= config.steps and summary is not None:
            notify(f"{str(run.path)!r} already trained {saved['step']} steps of {config.steps}: nothing to resume, "
                   "nothing changed")
            return summary
    try:
        with run.claimed(resume, lambda: _refuse_existing(run)):
            return _train_lm_locked(config, run, saved, progress)
    except RunBusyError as error:
        raise ConfigError(str(error)) from None


def _refuse_existing(run: RunDirectory) -> None:
    """Raise `ConfigError` when `run` already holds a run: a run directory is never overwritten."""
    if run.holds_run():
        raise ConfigError(f"{str(run.path)!r} already holds a run; pass --resume to continue it or choose "
                          "another --log-dir or seed")


def _train_lm_locked(config: LMConfig, run: RunDirectory, saved: dict[str, Any] | None,
                     progress: bool) -> dict[str, Any]:
    run.write(CONFIG_FILE, yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
    torch.manual_seed(config.seed)
    train, valid = config.stream("train"), config.stream("validation")
    model = build_model(config, train.vocab_size).to(config.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    state, step = model.initial_state(config.batch_size), 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state, step = saved["state"], saved["step"]
        torch.set_rng_state(saved["rng"])
    rows = _evaluation_rows(run / EVALUATIONS_FILE, step)
    _write_evaluations(run, rows)
    writer = SummaryWriter(str(run.path))
    batches = segments(train, config.batch_size, config.segment_length, first=step)
    started, losses, first = time.time(), [], step
    bar = _progress_bar(config.steps, step) if progress else None
    while step < config.steps:
        tokens, starts, scored = next(batches)
        # intermediate-layer losses fade out over the first half of training (Al-Rfou et al. 2019
        # drop them layer by layer; here they decay together, linearly), or stay (early exits)
        fade = max(0.0, 1.0 - 2.0 * step / config.steps) if config.intermediate_fade else 1.0
        intermediate = config.intermediate_weight * fade
        loss, state, _ = model.loss(tokens.to(config.device), state, starts.to(config.device), config.future_weight,
                                    intermediate, scored.to(config.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        model.backbone.invalidate_caches()  # the position terms and key caches follow the new parameters
        step += 1
        losses.append(loss.item())
        writer.add_scalar("train/loss", losses[-1], step)
        if bar is not None:
            bar.update(1)
        if step % config.eval_every == 0 or step == config.steps:
            bits = bits_per_token(model, valid, config, config.eval_segments)
            writer.add_scalar("eval/bits_per_token", bits, step)
            rows.append([str(step), f"{sum(losses) / len(losses):.5f}", f"{bits:.5f}", f"{time.time() - started:.1f}"])
            _write_evaluations(run, rows)
            losses = []
        if step % config.checkpoint_every == 0 or step == config.steps:
            _save_checkpoint(run, step, model, optimizer, state, config)
    writer.close()
    if bar is not None:
        bar.close()
    seconds = max(time.time() - started, 1e-9)
    summary = {"run": config.run_name(), "steps": step, "tokens": step * config.segment_length * config.batch_size,
               "steps_per_second": round((step - first) / seconds, 2), "torch_threads": torch.get_num_threads(),
               "valid_bits_per_token": bits_per_token(model, valid, config, config.eval_segments),
               "parameters": sum(p.numel() for p in model.parameters())}
    run.write(SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def _progress_bar(total: int, done: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="segment")


def load_run(directory: Path, **option_overrides: Any) -> tuple[LMConfig, MemoryLanguageModel]:
    """The config and the last checkpoint's model of a run, with backbone options overridden
    (`memory_length` for evaluation with a longer memory than training)."""
    if not (directory / "config.yaml").exists():
        raise ConfigError(f"{str(directory)!r} is not an LM run directory (no config.yaml)")
    if RunDirectory(directory).reader() == "evaluate":
        raise ConfigError(f"{str(directory)!r} is a training run of train_rl.py, not a language-model run: "
                          f"`evaluate {directory}` reads it")
    config = build_lm_config(directory / "config.yaml")
    checkpoint = _latest_checkpoint(lm_run(directory))
    if checkpoint is None:
        raise ConfigError(f"{str(directory)!r} has no checkpoint yet")
    model = build_model(config, config.stream("validation").vocab_size, **option_overrides).to(config.device)
    weights = _load_checkpoint(checkpoint, config.device)["model"]
    misfits = [name for name, tensor in model.state_dict().items()
               if name in weights and weights[name].shape != tensor.shape]
    if misfits:  # e.g. Linformer's projections have memory_length + 1 columns
        raise ConfigError(f"the weights of {str(directory)!r} do not fit {option_overrides}: {', '.join(misfits)} "
                          f"depend on the options it was trained with ({config.backbone_options})")
    model.load_state_dict(weights)
    return config, model


def evaluate_run(directory: Path, memory_length: int | None = None, n_segments: int | None = None
                 ) -> tuple[LMConfig, MemoryLanguageModel, float]:
    """A run's last checkpoint with `memory_length` (default: its own), and its validation bits per token
    over `n_segments` segments (default: the run's `eval_segments`)."""
    config, model = load_run(directory, **({} if memory_length is None else {"memory_length": memory_length}))
    bits = bits_per_token(model, config.stream("validation"), config, n_segments or config.eval_segments)
    return config, model, bits


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py lm` and its commands."""
    parser = OneLineParser(prog=f"{program()} lm", description="Train, evaluate and sample the LM variants.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a language model")
    train.add_argument("--config", "-c", help="YAML file of LM settings, or the name of a shipped one (python, "
                                              "configs/lm/python.yaml)")
    train.add_argument("-p", "--param", nargs="+", default=[], metavar="KEY=VALUE",
                       help="settings, e.g. backbone=gtrxl backbone_options.memory_length=64 steps=500")
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    train.add_argument("--progress", action="store_true", help="show a progress bar")
    evaluate = commands.add_parser("eval", help="bits per token on the validation split")
    evaluate.add_argument("run", help="run directory")
    evaluate.add_argument("--memory-length", type=int, nargs="+", default=[],
                          help="evaluate with these memory lengths (default: the training one)")
    evaluate.add_argument("--segments", type=int, default=None, help="validation segments (default: eval_segments)")
    evaluate.add_argument("--knn-weight", type=float, nargs="+", default=[],
                          help="kNN-LM: also evaluate the mixture with these weights λ (Khandelwal et al. 2020)")
    evaluate.add_argument("--knn-k", type=int, default=32, help="kNN-LM: neighbours retrieved per token")
    evaluate.add_argument("--datastore-segments", type=int, default=256,
                          help="kNN-LM: training segments whose (hidden state, next token) pairs fill the datastore")
    evaluate.add_argument("--spalm-steps", type=int, default=0,
                          help="SPALM: train its retrieval gate for this many training segments after the "
                               "datastore's (LM frozen), then evaluate it (Yogatama et al. 2021; uses --knn-k)")
    evaluate.add_argument("--spalm-lr", type=float, default=0.01, help="SPALM: the gate's Adam learning rate")
    evaluate.add_argument("--spalm-lm-lr", type=float, default=0.0,
                          help="SPALM: also fine-tune the LM with the gate at this learning rate (0: LM frozen)")
    evaluate.add_argument("--exit-threshold", type=float, nargs="+", default=[],
                          help="depth-adaptive exits: also evaluate with a position leaving after the first layer "
                               "whose prediction is this confident (Elbayad et al. 2020)")
    sample = commands.add_parser("sample", help="continue a prompt (byte-level data)")
    sample.add_argument("run", help="run directory")
    sample.add_argument("--prompt", default="def ", help="text to continue")
    sample.add_argument("-n", type=int, default=200, help="tokens to generate")
    sample.add_argument("--temperature", type=float, default=0.8)
    return parser


COMMAND_OPTIONS: dict[str, Rule] = {
    "memory_length": Items(COUNT, empty_ok=True), "segments": COUNT,
    "knn_weight": Items(Range(0.0, 1.0), empty_ok=True), "knn_k": COUNT, "datastore_segments": COUNT,
    "spalm_steps": Range(0, integer=True), "spalm_lr": Range(0.0, low_open=True), "spalm_lm_lr": NON_NEGATIVE,
    "exit_threshold": Items(Range(), empty_ok=True),  # above 1: no position leaves early
    "n": COUNT, "temperature": Range(0.0, low_open=True), "prompt": Text(note="the text to continue"),
}
"""the options of ``lm eval`` and ``lm sample`` with their rules"""


def check_command_options(args: argparse.Namespace) -> None:
    """Each option of `COMMAND_OPTIONS` given to the command against its rule (`ConfigError` naming
    the flag)."""
    for name, rule in COMMAND_OPTIONS.items():
        if getattr(args, name, None) is not None:  # None: not given, or not an option of this command
            rule.check("-n" if name == "n" else f"--{name.replace('_', '-')}", getattr(args, name))


def main(argv: list[str]) -> int:
    """`train_rl.py lm train|eval|sample`; exit status 2 on bad input, with the valid choices named."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        check_command_options(args)
        if args.command == "train":
            advise_on_signal("rerun the same command with --resume to continue")
            summary = train_lm(build_lm_config(config_path(args.config, "lm"), args.param), args.resume, args.progress)
            print(json.dumps(summary, indent=2))
        elif args.command == "eval":
            for memory_length in args.memory_length or [None]:
                config, model, bits = evaluate_run(Path(args.run), memory_length, args.segments)
                n_segments = args.segments or config.eval_segments
                label = memory_length or config.backbone_options.get("memory_length", "-")
                print(f"memory_length {label}: {bits:.4f} bits per token")
                if args.knn_weight or args.spalm_steps:
                    datastore = build_datastore(model, config.stream("train"), config, args.datastore_segments)
                for weight in args.knn_weight:
                    knn = KNNSettings(datastore, args.knn_k, weight)
                    bits = bits_per_token(model, config.stream("validation"), config, n_segments, knn)
                    print(f"memory_length {label}, kNN-LM λ = {weight} (k = {args.knn_k}, datastore of "
                          f"{len(datastore):,} tokens): {bits:.4f} bits per token")
                if args.spalm_steps:
                    tuned = copy.deepcopy(model) if args.spalm_lm_lr > 0 else model  # later rows read the LM as is
                    retrieval, _ = fine_tune(tuned, config.stream("train"), config, args.spalm_steps,
                                             args.datastore_segments, args.spalm_lm_lr,
                                             SPALMSettings(datastore, args.knn_k, args.spalm_lr))
                    bits, gate = spalm_bits(tuned, retrieval, config.stream("validation"), config, n_segments,
                                            datastore, args.knn_k)
                    lm = f"LM fine-tuned with it at lr {args.spalm_lm_lr}" if args.spalm_lm_lr > 0 else "LM frozen"
                    print(f"memory_length {label}, SPALM (k = {args.knn_k}, datastore of {len(datastore):,} tokens, "
                          f"gate trained on {args.spalm_steps} segments, {lm}): {bits:.4f} bits per token, "
                          f"mean gate {gate:.3f} (the LM's share)")
                for threshold in args.exit_threshold:
                    bits, layers = early_exit_bits(model, config.stream("validation"), config, n_segments, threshold)
                    n_layers = config.backbone_options.get("n_layers", "-")
                    print(f"memory_length {label}, early exits at confidence {threshold}: {bits:.4f} bits per token, "
                          f"{layers:.2f} of {n_layers} layers per token")
        else:
            config, model = load_run(Path(args.run))
            if config.data != "python":
                raise ConfigError(f"sampling text needs byte-level data (python), this run has {config.data!r}")
            prompt = torch.tensor(list(args.prompt.encode()), dtype=torch.long).view(-1, 1)
            model.eval()
            state = model.initial_state(1)
            if prompt.shape[0] > 1:  # read the prompt; its last token is the next input
                with torch.no_grad():
                    _, state, _ = model.loss(prompt, state)
            generated = model.generate(prompt[-1], state, args.n, args.temperature)[:, 0]
            print(args.prompt + bytes(generated.tolist()).decode(errors="replace"))
    except ValueError as error:  # ConfigError included: bad settings, and bad kNN-LM arguments
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
