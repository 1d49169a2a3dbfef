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
from torch.utils._pytree import tree_leaves
from torch.utils.tensorboard import SummaryWriter

from agents.on_policy import NonFiniteError, non_finite_tensors
from envs.atomic import write_error
from envs.rules import (
    FLOAT32_MAX,
    STEP_SIZE,
    Device,
    Entries,
    Flag,
    Items,
    OneOf,
    Range,
    Rule,
    Text,
    one_line,
    short,
    shown,
)
from experiments.cli.parser import Distinct, OneLineParser, program, real, whole
from experiments.config import SEED_LIMIT, ConfigError, coerce, field_default, load_yaml, parse_override
from experiments.config_files import config_path
from experiments.exits import advise_on_signal, error_line
from experiments.footprint import available_host_memory, human, uses_accelerator
from experiments.rules import Directory, PathName, Threads
from experiments.run_dir import (
    CHECKPOINTS,
    CONFIG_FILE,
    EVALUATIONS_FILE,
    SUMMARY_FILE,
    RunBusyError,
    RunDirectory,
    notify,
    rewind_tensorboard,
)
from experiments.training import using_threads
from lm.data import (
    BYTE_VOCAB,
    DATASETS,
    SPLITS,
    TOKEN_BYTES,
    TokenStream,
    make_stream,
    rows_fit,
    segments,
    stream_bytes,
    stream_length,
)
from policies import BACKBONES
from policies.backbones.transformer_xl import TransformerXL
from policies.lm.knn import QUERY_CHUNK, Datastore, knn_lm_loss, segment_keys
from policies.lm.model import MemoryLanguageModel, scored_mean
from policies.lm.spalm import GatedRetrieval, spalm_log_probs, spalm_loss
from policies.options import check_options
from policies.window import State

CHECKPOINT_PREFIX = "lm_"
EVAL_COLUMNS = ["step", "train_loss", "valid_bits_per_token", "wall_seconds"]


def _setting(rule: Rule, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A field of `LMConfig` whose valid values `rule` declares (`check_lm_config`)."""
    return field(default=default, metadata={"rule": rule}, **kwargs)


COUNT = Range(1, integer=True)
NON_NEGATIVE = Range(0.0)


LM_BACKBONE_OPTIONS: dict[str, dict[str, Any]] = {"trxl": {"d_model": 128, "n_layers": 2, "n_heads": 4,
                                                             "memory_length": 128}}
"""the options a language model gives its backbone by default, where they are not the backbone's own defaults"""


def default_backbone_options(backbone: Any) -> dict[str, Any]:
    """The options `backbone` gets when none are given: its `LM_BACKBONE_OPTIONS`, else none (its own defaults)."""
    return dict(LM_BACKBONE_OPTIONS.get(backbone, {})) if isinstance(backbone, str) else {}


@dataclass
class LMConfig:
    """Settings of one language-model run (YAML keys and `-p key=value` overrides); each field declares the
    rule of its valid values (`envs.rules`), checked by `check_lm_config`."""

    data: str = _setting(OneOf(lambda: DATASETS), "python")
    backbone: str = _setting(OneOf(lambda: BACKBONES), "trxl")
    backbone_options: dict[str, Any] = _setting(Entries(optional=False), None)  # type: ignore[assignment]
    """the backbone's options; not given (or null): `default_backbone_options` of the backbone"""
    d_embed: int = _setting(COUNT, 64)
    future_targets: int = _setting(Range(0, integer=True), 0)
    future_weight: float = _setting(NON_NEGATIVE, 0.5)
    intermediate_weight: float = _setting(NON_NEGATIVE, 0.0)
    intermediate_fade: bool = _setting(Flag(), True)
    segment_length: int = _setting(COUNT, 64)
    batch_size: int = _setting(COUNT, 16)
    steps: int = _setting(COUNT, 2000)
    learning_rate: float = _setting(STEP_SIZE, 5e-4)
    max_grad_norm: float = _setting(Range(0.0, low_open=True), 0.25)
    eval_every: int = _setting(COUNT, 250)
    eval_segments: int = _setting(COUNT, 32)
    checkpoint_every: int = _setting(COUNT, 250)
    seed: int = _setting(Range(0, SEED_LIMIT, integer=True), 0)
    threads: int = _setting(Threads(), 0)
    device: str = _setting(Device(), "cpu")
    log_dir: str = _setting(Directory(), "runs/lm")
    max_bytes: int = _setting(COUNT, 4_000_000)
    copy_tokens: int = _setting(COUNT, 200_000)
    copy_vocab: int = _setting(Range(2, integer=True), 16)
    copy_distance: int = _setting(COUNT, 64)
    recall_tokens: int = _setting(COUNT, 200_000)
    recall_vocab: int = _setting(Range(3, integer=True), 32)
    recall_pairs: int = _setting(COUNT, 8)

    def __post_init__(self) -> None:
        if self.backbone_options is None:
            self.backbone_options = default_backbone_options(self.backbone)

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

    def vocab_size(self) -> int:
        """The vocabulary of its data: bytes, or the synthetic task's `copy_vocab` or `recall_vocab`."""
        return {"python": BYTE_VOCAB, "associative-recall": self.recall_vocab}.get(self.data, self.copy_vocab)

    def length(self, split: str) -> int:
        """The tokens of its `split` stream, known without making it."""
        return stream_length(self.data, split, max_bytes=self.max_bytes,
                             n_tokens=self.recall_tokens if self.data == "associative-recall" else self.copy_tokens)

    def size_keys(self) -> str:
        """The settings that size its data, as `key=value`."""
        return {"python": f"max_bytes={self.max_bytes}", "copy": f"copy_tokens={self.copy_tokens}",
                "associative-recall": f"recall_tokens={self.recall_tokens}"}[self.data]

    def vocab_key(self) -> str:
        """The setting that gives its vocabulary, as `key=value` (`python`: bytes, no setting)."""
        return {"python": "", "copy": f"copy_vocab={self.copy_vocab}",
                "associative-recall": f"recall_vocab={self.recall_vocab}"}[self.data]


FIELDS = {f.name: f for f in dataclasses.fields(LMConfig)}
RESUMABLE = ("steps", "device", "threads", "log_dir", "eval_every", "eval_segments", "checkpoint_every")
"""settings a resumed run may change: its budget, where and how fast it runs, how often it reports"""


def build_lm_config(file: str | Path | None = None, overrides: list[str] | None = None) -> LMConfig:
    """A config from defaults, a YAML file, then `key=value` overrides (`backbone_options.d_model=64`), checked
    by `check_lm_config`. Options given key by key go on top of the `backbone_options` given, else of
    `default_backbone_options` of the backbone.

    Raises:
        ConfigError: an unknown key, or a value of the wrong type or outside its rule; one line naming the key, the
            value and what is valid.
    """
    values: dict[str, Any] = dict(load_yaml(file, example="backbone: gtrxl") if file else {})
    options: dict[str, Any] = {}  # backbone_options.<key>=value since the last whole backbone_options, if any
    for text in overrides or []:
        key, value = parse_override(text)
        head, _, rest = key.partition(".")
        if rest and head == "backbone_options":
            options[rest] = value
        else:
            values[key] = value
            options = {} if key == "backbone_options" else options
    if options:
        given = values.get("backbone_options")
        backbone = values.get("backbone", field_default(FIELDS["backbone"]))
        base = given if isinstance(given, dict) else default_backbone_options(backbone)
        values["backbone_options"] = {**base, **options}
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"unknown LM setting(s) {', '.join(short(repr(key)) for key in unknown)}; valid: "
                          f"{', '.join(sorted(FIELDS))}")
    config = LMConfig(**{key: coerce(key, value, field_default(FIELDS[key])) for key, value in values.items()})
    if config.backbone in BACKBONES and isinstance(config.backbone_options, dict):
        # each option it takes as the type of its default; an unknown one, or options that are no mapping: refused next
        defaults = BACKBONES[config.backbone].options()
        config.backbone_options = {
            key: coerce(f"backbone_options.{key}", value, defaults[key]) if defaults.get(key) is not None else value
            for key, value in config.backbone_options.items()}
    check_lm_config(config)
    return config


def check_lm_config(config: LMConfig) -> None:
    """Refuse `config` (`ConfigError`, one line naming the key, the value and what is valid) where a setting
    breaks its rule, no file can be created in its log_dir, a backbone option is unknown or refused by the
    backbone's own rules, the data is too small for the settings that read it (`check_data_sizes`), the model
    cannot be made, the run would not fit in memory (`check_fits`), or the validation segments hold no scored
    token; before anything is created. The model is built on PyTorch's `meta` device: every constructor check
    runs, no storage is allocated."""
    if not isinstance(config, LMConfig):
        raise ConfigError(f"config={shown(config)}: expected an LMConfig (build_lm_config makes one)")
    for spec in dataclasses.fields(LMConfig):
        spec.metadata["rule"].check(spec.name, getattr(config, spec.name))
    Directory().check_writable("log_dir", config.log_dir)
    valid = BACKBONES[config.backbone].options()
    unknown = [key for key in config.backbone_options if key not in valid]
    if unknown:
        raise ConfigError(f"unknown option {short(repr(unknown[0]))} in backbone_options of {config.backbone}; valid "
                          f"options: {', '.join(valid)}")
    check_options(BACKBONES[config.backbone].cls.__init__, config.backbone_options, prefix="backbone_options.")
    check_data_sizes(config)
    try:
        model = meta_model(config)
    except Exception as error:  # a constructor's own check, named with the options it was given
        raise ConfigError(f"backbone={config.backbone} with backbone_options {short(repr(config.backbone_options))}: "
                          f"{one_line(error)}") from None
    check_fits(lm_needs(config, model, training=True), config.device)
    check_scored(config, config.eval_segments, "eval_segments")


def meta_model(config: LMConfig, **option_overrides: Any) -> MemoryLanguageModel:
    """The model of `config` (its options overridden) on PyTorch's `meta` device: every constructor check runs,
    no storage is allocated."""
    with torch.device("meta"):
        return MemoryLanguageModel(config.vocab_size(), config.backbone, config.d_embed, config.future_targets,
                                   **{**config.backbone_options, **option_overrides})


def check_data_sizes(config: LMConfig) -> None:
    """Refuse (`ConfigError`) data too small for the settings that read it, from the sizes alone (no stream is
    made): each split must hold `batch_size` rows of a segment (`segment_length + 1` tokens), the copy task at
    least one block and its copy, associative recall at least one record, and a segment the target of every
    future head."""
    T = config.segment_length
    if config.future_targets > T - 1:  # head k predicts the token k + 2 steps ahead, inside the segment
        raise ConfigError(f"future_targets={config.future_targets}: future head k predicts the token k + 2 steps "
                          f"ahead inside a segment of segment_length + 1 = {T + 1} tokens; expected future_targets "
                          f"<= segment_length - 1 = {T - 1}")
    for split in SPLITS:
        length = config.length(split)
        if not rows_fit(length, config.batch_size, config.segment_length):
            held = config.size_keys() if length == config.max_bytes or config.data != "python" else \
                f"all of its files; {config.size_keys()}"
            B, T = config.batch_size, config.segment_length
            raise ConfigError(
                f"data={config.data}: a stream of {length} tokens is too short for {B} rows of segments of {T} tokens "
                f"(the {split} split; {held}); expected batch_size × (segment_length + 1) <= {length}, here "
                f"batch_size={B} × {T + 1} = {B * (T + 1)}")
    if config.data == "copy" and 2 * config.copy_distance > config.copy_tokens:
        raise ConfigError(f"copy_distance={config.copy_distance}: a block and its copy take 2 × copy_distance tokens; "
                          f"expected copy_distance <= copy_tokens // 2 = {config.copy_tokens // 2} "
                          f"(copy_tokens={config.copy_tokens})")
    keys = (config.recall_vocab - 1) // 2
    if config.data == "associative-recall" and config.recall_pairs > keys:
        raise ConfigError(f"recall_pairs={config.recall_pairs}: a record holds distinct keys, of which "
                          f"recall_vocab={config.recall_vocab} has (recall_vocab - 1) // 2 = {keys}; expected "
                          f"recall_pairs <= {keys}")
    record = 2 * config.recall_pairs + 3
    if config.data == "associative-recall" and config.recall_tokens < record:
        raise ConfigError(f"recall_tokens={config.recall_tokens}: a record of recall_pairs={config.recall_pairs} "
                          f"pairs takes 2 × recall_pairs + 3 = {record} tokens; expected recall_tokens >= {record}")


def check_scored(config: LMConfig, n_segments: int, key: str) -> None:
    """Refuse (`ConfigError` naming `key`) `n_segments` validation segments that hold no scored token; synthetic
    data is made in milliseconds, so its own checks (associative recall's pairs) run here too."""
    if config.data == "python":  # every byte is scored
        return
    try:
        batches = segments(config.stream("validation"), config.batch_size, config.segment_length)
        per_pass = (config.length("validation") // config.batch_size - 1) // config.segment_length
        scored = sum(int(next(batches)[2][1:].sum()) for _ in range(min(n_segments, per_pass)))  # then they repeat
    except ValueError as error:
        raise ConfigError(f"data={config.data}: {one_line(error)}") from None
    if not scored:
        raise ConfigError(f"{key}={n_segments}: the first {n_segments} validation segments of data={config.data} "
                          "hold no scored token; expected more segments")


@dataclass(frozen=True)
class Need:
    """One part of what a command holds in memory: its bytes, the settings it grows with (`key=value`), and
    whether it lives on the accelerator when the run uses one."""

    name: str
    size: int
    keys: str
    on_device: bool = True


FLOAT = 4
"""bytes of a float32"""


def lm_needs(config: LMConfig, model: MemoryLanguageModel, training: bool, memory_key: str = "",
             memory_length: int | None = None, datastore_entries: int = 0, datastore_key: str = "",
             streams: tuple[str, ...] = SPLITS) -> list[Need]:
    """What training (`training`) or evaluating the model of `config` holds at most, `model` built on the `meta`
    device: the `streams` (host memory), the parameters (with gradients and Adam's moments when training), the
    memory carried between segments, one layer's attention scores, the logits of a segment and a kNN datastore of
    `datastore_entries` entries with its search. Activations besides those are left out: what it refuses could
    never fit. `memory_key` names the setting of `memory_length` (default: the run's)."""
    B, T, V = config.batch_size, config.segment_length, config.vocab_size()
    options = config.backbone_options
    memory_length = options.get("memory_length") if memory_length is None else memory_length
    memory_key = memory_key or (f"backbone_options.memory_length={memory_length}" if memory_length else "")
    lengths = {split: config.length(split) for split in streams}
    recall = {"vocab_size": config.recall_vocab, "n_pairs": config.recall_pairs}
    resident = sum(TOKEN_BYTES * n for n in lengths.values())
    making = max((stream_bytes(config.data, n, **recall) - TOKEN_BYTES * n for n in lengths.values()), default=0)
    data_keys = ", ".join(filter(None, [config.size_keys(), config.vocab_key() if config.data ==
                                        "associative-recall" else ""]))
    model_keys = ", ".join(filter(None, [config.vocab_key(), f"d_embed={config.d_embed}",
                                         f"backbone_options={short(repr(options))}"]))
    with torch.device("meta"):
        state = model.initial_state(B)
    state_bytes = sum(t.numel() * t.element_size() for t in tree_leaves(state) if isinstance(t, Tensor))
    needs = [Need("data", resident + making, data_keys, on_device=False),
             Need("model and optimizer" if training else "model",
                  (4 if training else 1) * sum(p.numel() * p.element_size() for p in model.parameters()), model_keys),
             Need("memory", 2 * state_bytes, ", ".join(filter(None, [f"batch_size={B}", memory_key]))),
             Need("logits", 3 * FLOAT * B * T * V, ", ".join(filter(None, [f"batch_size={B}", f"segment_length={T}",
                                                                            config.vocab_key()])))]
    if memory_length and "n_heads" in options:
        layers = options.get("n_layers", 1) if training else 1  # kept for the backward pass, else one at a time
        needs.append(Need("attention scores", 2 * FLOAT * B * options["n_heads"] * T * (T + memory_length) * layers,
                          f"batch_size={B}, segment_length={T}, {memory_key}"))
    if datastore_entries:
        width = model.head.in_features
        needs.append(Need("datastore", datastore_entries * (2 * FLOAT * width + 8 + 3 * FLOAT * QUERY_CHUNK),
                          datastore_key))
    return needs


def check_fits(needs: list[Need], device: str) -> None:
    """Refuse (`ConfigError`) `needs` larger than the host memory available (or, for the parts on the
    accelerator, its free memory), naming first the settings of the largest part, then every part."""
    on_gpu = uses_accelerator(device)
    places = [("RAM", [n for n in needs if not (on_gpu and n.on_device)], available_host_memory())]
    if on_gpu:
        free = torch.cuda.mem_get_info(torch.device(device if device != "auto" else "cuda"))[0]
        places.append(("GPU memory", [n for n in needs if n.on_device], free))
    for place, parts, available in places:
        total = sum(part.size for part in parts)
        if total > available:
            parts = sorted(parts, key=lambda part: -part.size)
            detail = "; ".join(f"{part.name} {human(part.size)} ({part.keys})" for part in parts if part.size)
            raise ConfigError(f"{parts[0].keys}: this would need about {human(total)} of {place} but "
                              f"{human(available)} is available ({detail}); expected smaller settings")


def build_model(config: LMConfig, vocab_size: int, **option_overrides: Any) -> MemoryLanguageModel:
    try:
        return MemoryLanguageModel(vocab_size, config.backbone, config.d_embed, config.future_targets,
                                   **{**config.backbone_options, **option_overrides})
    except ValueError as error:
        raise ConfigError(str(error)) from error


def lm_run(directory: Path) -> RunDirectory:
    """The LM run directory at `directory`."""
    return RunDirectory(directory, CHECKPOINT_PREFIX, ".pt", log_dir_key="log_dir", own_reader="lm eval")


def _latest_checkpoint(run: RunDirectory) -> Path | None:
    found = run.latest_checkpoint()
    return None if found is None else found[0]


def _save_checkpoint(run: RunDirectory, step: int, model: MemoryLanguageModel, optimizer: torch.optim.Optimizer,
                     state: State, config: LMConfig, wall_seconds: float) -> None:
    """The model, optimizer, carried memory, step, random state, the run's settings and the wall seconds it has
    trained (over every resume), written whole."""
    saved = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
             "rng": torch.get_rng_state(), "config": dataclasses.asdict(config), "wall_seconds": wall_seconds}
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
        NonFiniteError: a loss, the gradients or, after a step, the parameters trained are not finite.
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
    trained = {f"gate.{name}": p for name, p in (retrieval.named_parameters() if retrieval is not None else [])}
    trained |= dict(model.named_parameters()) if train_lm else {}
    for index, (tokens, starts, scored) in enumerate(itertools.islice(batches, n_segments)):
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
        where = f"fine-tuning segment {index + 1} of {n_segments}"
        check_finite_gradients(loss, trained, where)
        if train_lm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        check_finite_parameters(trained, where)
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


def check_finite_gradients(loss: Tensor, named: dict[str, Tensor], where: str, norm: Tensor | None = None) -> None:
    """Raise `NonFiniteError` when `loss` or the gradient norm of the parameters `named` (`norm`, computed when
    not given) is not finite, naming `where` and the tensors."""
    grads = {name: p.grad for name, p in named.items() if p.grad is not None}
    if norm is None:
        norm = torch.nn.utils.get_total_norm(list(grads.values())) if grads else torch.zeros((), device=loss.device)
    if torch.isfinite(loss.detach() + norm):
        return
    if not torch.isfinite(loss):
        raise NonFiniteError(f"non-finite training loss ({loss.item()}) at {where}")
    raise NonFiniteError(f"non-finite gradient norm at {where}: {non_finite_tensors(grads)}")


@torch.no_grad()
def check_finite_parameters(named: dict[str, Tensor], where: str) -> None:
    """Raise `NonFiniteError` when a parameter of `named`, or the norm over them, is not finite after `where`."""
    if named and not torch.isfinite(torch.stack(torch._foreach_norm(list(named.values())))).all():
        raise NonFiniteError(f"non-finite parameter norm after {where}: {non_finite_tensors(named)}")


def check_finite_bits(bits: float, where: str) -> float:
    """`bits`; `NonFiniteError` when they are not finite (the model's predictions overflowed)."""
    if not math.isfinite(bits):
        raise NonFiniteError(f"non-finite validation bits per token ({bits}) after {where}")
    return bits


def train_lm(config: LMConfig, resume: bool = False, progress: bool = False) -> dict[str, Any]:
    """Train (or, with `resume`, continue) the run of `config`; returns its summary.

    The run directory is an `RunDirectory`, with an RL run's guarantees: `config` is
    checked before anything is created, one process writes it (its lock), a new run refuses a directory that holds
    one, and every file is written whole. `resume` continues from the newest checkpoint, with the settings it was
    made with (those of `RESUMABLE` may change), dropping the evaluations after it; one that already reaches
    `steps` changes nothing.

    Raises:
        ConfigError: a bad setting, or a run directory that cannot take this run.
        NonFiniteError: the training loss, the gradient norm, a parameter or the validation bits became NaN or
            infinite; training stops there, the run's checkpoints (all made before) are kept, and the message
            names the step, the quantity and the last checkpoint.
    """
    check_lm_config(config)
    Flag().check("resume", resume)
    Flag().check("progress", progress)
    with using_threads(config.threads):
        run = config.run()
        try:
            run.check_not_busy()
        except RunBusyError as error:
            raise ConfigError(str(error)) from None
        if not resume:
            _refuse_existing(run)
        checkpoint = _latest_checkpoint(run) if resume else None
        if resume and checkpoint is None:
            notify(f"--resume: nothing to resume in {str(run.path)!r} (no checkpoint); starting from step 0")
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
                          "another -p log_dir=... or seed=...")


def _train_lm_locked(config: LMConfig, run: RunDirectory, saved: dict[str, Any] | None,
                     progress: bool) -> dict[str, Any]:
    run.write(CONFIG_FILE, yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
    torch.manual_seed(config.seed)
    train, valid = config.stream("train"), config.stream("validation")
    model = build_model(config, config.vocab_size()).to(config.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
    state, step, spent = model.initial_state(config.batch_size), 0, 0.0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state, step, spent = saved["state"], saved["step"], saved.get("wall_seconds", 0.0)
        torch.set_rng_state(saved["rng"])
    rows = _evaluation_rows(run / EVALUATIONS_FILE, step)
    _write_evaluations(run, rows)
    rewind_tensorboard(run.path, step)  # a resume logs the steps after its checkpoint again
    try:
        writer = SummaryWriter(str(run.path))
    except OSError as error:  # tensorboard's events file, named by its folder
        raise write_error(error, run.path) from error
    batches = segments(train, config.batch_size, config.segment_length, first=step)
    started, losses, first = time.time(), [], step
    bar = _progress_bar(config.steps, step) if progress else None
    named = dict(model.named_parameters())
    try:
        while step < config.steps:
            tokens, starts, scored = next(batches)
            # intermediate-layer losses fade out over the first half of training (Al-Rfou et al. 2019
            # drop them layer by layer; here they decay together, linearly), or stay (early exits)
            fade = max(0.0, 1.0 - 2.0 * step / config.steps) if config.intermediate_fade else 1.0
            intermediate = config.intermediate_weight * fade
            loss, state, _ = model.loss(tokens.to(config.device), state, starts.to(config.device),
                                        config.future_weight, intermediate, scored.to(config.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            check_finite_gradients(loss, named, f"step {step + 1}", grad_norm)  # before the step changes anything
            optimizer.step()
            check_finite_parameters(named, f"step {step + 1}")
            model.backbone.invalidate_caches()  # the position terms and key caches follow the new parameters
            step += 1
            losses.append(loss.item())
            writer.add_scalar("train/loss", losses[-1], step)
            if bar is not None:
                bar.update(1)
            if step % config.eval_every == 0 or step == config.steps:
                bits = check_finite_bits(bits_per_token(model, valid, config, config.eval_segments), f"step {step}")
                writer.add_scalar("eval/bits_per_token", bits, step)
                rows.append([str(step), f"{sum(losses) / len(losses):.5f}", f"{bits:.5f}",
                             f"{spent + time.time() - started:.1f}"])
                _write_evaluations(run, rows)
                losses = []
            if step % config.checkpoint_every == 0 or step == config.steps:
                _save_checkpoint(run, step, model, optimizer, state, config, spent + time.time() - started)
        seconds = max(time.time() - started, 1e-9)
        bits = check_finite_bits(bits_per_token(model, valid, config, config.eval_segments), f"step {step}")
    except NonFiniteError as error:  # every checkpoint was saved before it: the run resumes from the last one
        raise NonFiniteError(f"{error}; {run.checkpoint_note()}") from error
    except OSError as error:  # a write of tensorboard's (which names no file) or of the run's own files
        raise write_error(error, run.path) from error
    finally:
        if bar is not None:
            bar.close()
        try:
            writer.close()  # tensorboard's events on disk now: a write that fails fails here, named
        except OSError as error:
            raise write_error(error, run.path) from error
    summary = {"run": config.run_name(), "steps": step, "tokens": step * config.segment_length * config.batch_size,
               "steps_per_second": round((step - first) / seconds, 2), "torch_threads": torch.get_num_threads(),
               "valid_bits_per_token": bits, "parameters": sum(p.numel() for p in model.parameters())}
    run.write(SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def _progress_bar(total: int, done: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="segment")


RUN_DIRECTORY = f"an LM run directory (its {CONFIG_FILE} and {CHECKPOINTS}/{CHECKPOINT_PREFIX}<step>.pt)"


def read_lm_run(directory: str | Path, key: str = "run") -> LMConfig:
    """The settings of the LM run in `directory`, read without loading its weights; `ConfigError` naming `key`
    when `directory` is missing, a file, not a run, a training run of `train_rl.py`, or holds no checkpoint."""
    PathName().check(key, directory)
    directory = Path(directory)
    where = f"{key}={str(directory)!r}"
    if not directory.exists():
        raise ConfigError(f"{where}: no such directory; expected {RUN_DIRECTORY}")
    if not directory.is_dir():
        raise ConfigError(f"{where}: is a file; expected {RUN_DIRECTORY}")
    if RunDirectory(directory).reader() == "evaluate":
        raise ConfigError(f"{str(directory)!r} is a training run of train_rl.py, not a language-model run: "
                          f"`evaluate {directory}` reads it")
    if not (directory / CONFIG_FILE).is_file():
        raise ConfigError(f"{str(directory)!r} is not an LM run directory (no {CONFIG_FILE}); expected "
                          f"{RUN_DIRECTORY}")
    config = build_lm_config(directory / CONFIG_FILE)
    if _latest_checkpoint(lm_run(directory)) is None:
        raise ConfigError(f"{str(directory)!r} has no checkpoint yet")
    return config


def check_memory_lengths(config: LMConfig, lengths: list[int], key: str = "memory_length") -> None:
    """Refuse (`ConfigError` naming `key`) evaluation memory lengths the run cannot take: a backbone without a
    memory length, one its constructor refuses, one its trained weights depend on (Linformer's projections),
    or a memory that does not fit in memory. Nothing is loaded: the models are built on the `meta` device."""
    if not lengths:
        return
    trained = meta_model(config)
    if "memory_length" not in BACKBONES[config.backbone].options():
        raise ConfigError(f"{key}={lengths}: the run's backbone {config.backbone} has no memory_length; expected "
                          f"no {key}")
    for length in lengths:
        Range(1, integer=True).check(key, length)
        try:
            model = meta_model(config, memory_length=length)
        except Exception as error:  # the constructor's own check
            raise ConfigError(f"{key}={length}: {one_line(error)}") from None
        shapes = trained.state_dict()
        misfits = [name for name, tensor in model.state_dict().items()
                   if name in shapes and shapes[name].shape != tensor.shape]
        if misfits:  # e.g. Linformer's projections have memory_length + 1 columns
            raise ConfigError(f"{key}={length}: the weights of the run do not fit {{'memory_length': {length}}}: "
                              f"{', '.join(misfits)} depend on the options it was trained with "
                              f"({config.backbone_options}); expected {key}="
                              f"{config.backbone_options.get('memory_length')}")
        check_fits(lm_needs(config, model, training=False, memory_key=f"{key}={length}", memory_length=length,
                            streams=("validation",)), config.device)


def datastore_entries(config: LMConfig, datastore_segments: int) -> int:
    """The entries of a kNN datastore of `datastore_segments` training segments: one per input token."""
    return datastore_segments * config.batch_size * config.segment_length


def check_retrieval(config: LMConfig, k: int, datastore_segments: int, k_key: str = "k",
                    segments_key: str = "datastore_segments") -> None:
    """Refuse (`ConfigError` naming the keys) `k` neighbours outside `1 … ` the datastore's entries, or a
    datastore that does not fit in memory."""
    entries = datastore_entries(config, datastore_segments)
    Range(1, entries, integer=True, note=f"the datastore's entries: {segments_key}={datastore_segments} × "
          f"batch_size={config.batch_size} × segment_length={config.segment_length} of the run").check(k_key, k)
    check_fits(lm_needs(config, meta_model(config), training=False, datastore_entries=entries,
                        datastore_key=f"{segments_key}={datastore_segments}, batch_size={config.batch_size}, "
                                      f"segment_length={config.segment_length}"), config.device)


def check_exits(config: LMConfig, thresholds: list[float], key: str = "threshold") -> None:
    """Refuse (`ConfigError` naming `key`) early exits for a backbone without a stack of distinct layers."""
    if thresholds and not isinstance(meta_model(config).backbone, TransformerXL):
        raise ConfigError(f"{key}={thresholds}: early exits need a stack of distinct Transformer layers "
                          f"(trxl, trxl-i, gtrxl); the run's backbone is {config.backbone}")


def load_run(directory: str | Path, **option_overrides: Any) -> tuple[LMConfig, MemoryLanguageModel]:
    """The config and the last checkpoint's model of a run, with backbone options overridden
    (`memory_length` for evaluation with a longer memory than training), each checked (`read_lm_run`,
    `check_memory_lengths`) before the weights load."""
    config = read_lm_run(directory)
    directory = Path(directory)
    if "memory_length" in option_overrides:
        check_memory_lengths(config, [option_overrides["memory_length"]])
    checkpoint = _latest_checkpoint(lm_run(directory))
    assert checkpoint is not None  # read_lm_run refuses a run without one
    model = build_model(config, config.vocab_size(), **option_overrides).to(config.device)
    weights = _load_checkpoint(checkpoint, config.device)["model"]
    misfits = [name for name, tensor in model.state_dict().items()
               if name in weights and weights[name].shape != tensor.shape]
    if misfits:  # e.g. Linformer's projections have memory_length + 1 columns; or a checkpoint of another run
        shapes = "; ".join(f"{name} {tuple(weights[name].shape)}, the model's {tuple(model.state_dict()[name].shape)}"
                           for name in misfits)
        model_of = f"with {option_overrides}" if option_overrides else "its config.yaml describes"
        raise ConfigError(f"the weights of {str(checkpoint)!r} do not fit the model {model_of}: {shapes} (options "
                          f"trained with: data={config.data}, {config.backbone_options})")
    model.load_state_dict(weights)
    return config, model


def evaluate_run(directory: Path, memory_length: int | None = None, n_segments: int | None = None
                 ) -> tuple[LMConfig, MemoryLanguageModel, float]:
    """A run's last checkpoint with `memory_length` (default: its own), and its validation bits per token
    over `n_segments` segments (default: the run's `eval_segments`)."""
    if n_segments is not None:
        COUNT.check("n_segments", n_segments)
        check_scored(read_lm_run(directory), n_segments, "n_segments")
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
    train.add_argument("-p", "--param", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                       help="settings, e.g. backbone=gtrxl backbone_options.memory_length=64 steps=500")
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    train.add_argument("--progress", action="store_true", help="show a progress bar")
    evaluate = commands.add_parser("eval", help="bits per token on the validation split")
    evaluate.add_argument("run", help="run directory")
    evaluate.add_argument("--memory-length", type=whole, nargs="+", action=Distinct, default=[],
                          help="evaluate with these memory lengths (default: the training one)")
    evaluate.add_argument("--segments", type=whole, default=None, help="validation segments (default: eval_segments)")
    evaluate.add_argument("--knn-weight", type=real, nargs="+", action=Distinct, default=[],
                          help="kNN-LM: also evaluate the mixture with these weights λ (Khandelwal et al. 2020)")
    evaluate.add_argument("--knn-k", type=whole, default=None,
                          help=f"kNN-LM and SPALM: neighbours retrieved per token (default: {EVAL_DEFAULTS['knn_k']}; "
                               "needs --knn-weight or --spalm-steps)")
    evaluate.add_argument("--datastore-segments", type=whole, default=None,
                          help="kNN-LM and SPALM: training segments whose (hidden state, next token) pairs fill the "
                               f"datastore (default: {EVAL_DEFAULTS['datastore_segments']}; needs --knn-weight or "
                               "--spalm-steps)")
    evaluate.add_argument("--spalm-steps", type=whole, default=0,
                          help="SPALM: train its retrieval gate for this many training segments after the "
                               "datastore's (LM frozen), then evaluate it (Yogatama et al. 2021; uses --knn-k)")
    evaluate.add_argument("--spalm-lr", type=real, default=0.01, help="SPALM: the gate's Adam learning rate")
    evaluate.add_argument("--spalm-lm-lr", type=real, default=None,
                          help="SPALM: also fine-tune the LM with the gate at this learning rate (default: "
                               f"{EVAL_DEFAULTS['spalm_lm_lr']}, LM frozen; needs --spalm-steps)")
    evaluate.add_argument("--exit-threshold", type=real, nargs="+", action=Distinct, default=[],
                          help="depth-adaptive exits: also evaluate with a position leaving after the first layer "
                               "whose most probable next token has at least this probability, in (0, 1] "
                               "(Elbayad et al. 2020)")
    sample = commands.add_parser("sample", help="continue a prompt (byte-level data)")
    sample.add_argument("run", help="run directory")
    sample.add_argument("--prompt", default="def ", help="text to continue")
    sample.add_argument("-n", type=whole, default=200, help="tokens to generate")
    sample.add_argument("--temperature", type=real, default=0.8)
    return parser


COMMAND_OPTIONS: dict[str, Rule] = {
    "run": Text(note="an LM run directory"),
    "memory_length": Items(COUNT, empty_ok=True), "segments": COUNT,
    "knn_weight": Items(Range(0.0, 1.0), empty_ok=True), "knn_k": COUNT, "datastore_segments": COUNT,
    "spalm_steps": Range(0, integer=True), "spalm_lr": STEP_SIZE,
    "spalm_lm_lr": Range(0.0, FLOAT32_MAX, note="a float32: the optimiser scales float32 weights by it"),
    "exit_threshold": Items(Range(0.0, 1.0, low_open=True, note="the probability of a layer's most probable next "
                                                                "token at which a position leaves"), empty_ok=True),
    "n": COUNT, "temperature": Range(0.0, low_open=True), "prompt": Text(note="the text to continue"),
}
"""the options of ``lm eval`` and ``lm sample`` with their rules"""
FLAGS = {"run": "run", "n": "-n"}
"""the names the command line gives the options whose flag is not `--name-with-dashes`"""


EVAL_DEFAULTS = {"knn_k": 32, "datastore_segments": 256, "spalm_lm_lr": 0.0}
"""the values of the ``lm eval`` options that default to None on the command line, to tell given from not given"""
NEEDS = {"knn_k": ("knn_weight", "spalm_steps"), "datastore_segments": ("knn_weight", "spalm_steps"),
         "spalm_lm_lr": ("spalm_steps",)}
"""the ``lm eval`` options that change nothing without one of these others"""


def flag(name: str) -> str:
    """The command line's name of option `name`: `--knn-k`, `-n`, `run`."""
    return FLAGS.get(name, f"--{name.replace('_', '-')}")


def check_command_options(args: argparse.Namespace) -> None:
    """Each option of `COMMAND_OPTIONS` given to the command against its rule (`ConfigError` naming
    the flag)."""
    for name, rule in COMMAND_OPTIONS.items():
        if getattr(args, name, None) is not None:  # None: not given, or not an option of this command
            rule.check(flag(name), getattr(args, name))


def resolve_eval_options(args: argparse.Namespace) -> None:
    """Refuse (`ConfigError` naming the flag and the flags it needs) an ``lm eval`` option of `NEEDS` given
    without any of the options it needs, then set those not given to `EVAL_DEFAULTS`."""
    for name, needed in NEEDS.items():
        if getattr(args, name) is not None and not any(getattr(args, other) for other in needed):
            raise ConfigError(f"{flag(name)}={getattr(args, name)}: takes effect only with "
                              f"{' or '.join(map(flag, needed))}; give {'one' if len(needed) > 1 else 'it'} too, "
                              f"or drop {flag(name)}")
    for name, default in EVAL_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def check_eval_options(config: LMConfig, args: argparse.Namespace) -> None:
    """The options of ``lm eval`` whose valid values depend on the run (`config`), each against it before
    anything loads: the memory lengths, the segments (they must hold a scored token), `--knn-k` against the
    datastore of `--datastore-segments` and early exits against the backbone."""
    check_memory_lengths(config, args.memory_length, flag("memory_length"))
    if args.segments is not None:
        check_scored(config, args.segments, flag("segments"))
    if args.knn_weight or args.spalm_steps:
        check_retrieval(config, args.knn_k, args.datastore_segments, flag("knn_k"), flag("datastore_segments"))
    check_exits(config, args.exit_threshold, flag("exit_threshold"))


def read_prompt(model: MemoryLanguageModel, prompt: bytes, segment_length: int) -> tuple[Tensor, State]:
    """The state after reading `prompt` but its last byte, segment by segment of `segment_length` bytes as in
    training (the memory, not one long segment, carries it), and that last byte, the next input."""
    tokens = torch.tensor(list(prompt), dtype=torch.long, device=model.head.weight.device).view(-1, 1)
    state = model.initial_state(1)
    with torch.no_grad():
        for begin in range(0, tokens.shape[0] - 1, segment_length):
            _, state, _ = model.hidden_states(tokens[begin:min(begin + segment_length, tokens.shape[0] - 1)], state)
    return tokens[-1], state


def main(argv: list[str]) -> int:
    """`train_rl.py lm train|eval|sample`; exit status 2 on bad input, with the valid choices named, before
    anything is created or loaded; 3 when training (``lm train``, ``lm eval --spalm-steps``) meets a non-finite
    value."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        check_command_options(args)
        if args.command == "train":
            advise_on_signal("rerun the same command with --resume to continue")
            summary = train_lm(build_lm_config(config_path(args.config, "lm"), args.param), args.resume, args.progress)
            print(json.dumps(summary, indent=2))
        elif args.command == "eval":
            resolve_eval_options(args)
            check_eval_options(read_lm_run(Path(args.run)), args)
            for memory_length in args.memory_length or [None]:
                config, model, bits = evaluate_run(Path(args.run), memory_length, args.segments)
                n_segments = args.segments or config.eval_segments
                options = {**BACKBONES[config.backbone].options(), **config.backbone_options}  # its defaults too
                label = memory_length or options.get("memory_length", "-")
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
                    n_layers = options.get("n_layers", "-")
                    print(f"memory_length {label}, early exits at confidence {threshold}: {bits:.4f} bits per token, "
                          f"{layers:.2f} of {n_layers} layers per token")
        else:
            config = read_lm_run(Path(args.run))
            if config.data != "python":
                raise ConfigError(f"run={args.run!r}: sampling text needs byte-level data (data=python), this run "
                                  f"has data={config.data}")
            prompt = args.prompt.encode(errors="surrogateescape")  # the bytes given, whatever their encoding
            config, model = load_run(Path(args.run))
            model.eval()
            last, state = read_prompt(model, prompt, config.segment_length)
            generated = model.generate(last, state, args.n, args.temperature)[:, 0]
            print((prompt + bytes(generated.tolist())).decode(errors="replace"))
    except ValueError as error:  # ConfigError included: bad settings, and bad kNN-LM arguments
        print(error_line(error), file=sys.stderr)
        return 2
    except NonFiniteError as error:
        print(f"{'training' if args.command == 'train' else 'fine-tuning'} stopped: {error}", file=sys.stderr)
        return 3
    return 0
