"""The report of a seed study, from the run directories on disk alone (any launcher, any moment).

`build_report(study_dir)` writes `report.md` and PNG figures next to it:

- per task, learning curves per backbone (mean over finished runs with a 95 % bootstrap band,
  each seed as a thin line, runs that diverged or failed dashed) — `curves_<task>.png`;
- per task (and over all tasks when they share a [0, 1] success score), final scores: mean, std,
  median and IQM with 95 % stratified bootstrap CIs, every run's score, and the probability of
  improvement between each pair of backbones — `scores_<task>.png`, `improvement_<task>.png`;
- per task, reliability: share of runs that solve the task, runs that solved it and then lost it (an evaluation
  at or above the threshold, the final one below), runs that diverged or failed, and the dispersion (IQR) and risk
  (CVaR of the worst 25 %) of the final scores (Chan et al. 2020);
- per task, the final and best (POPGym's MMER) deterministic evaluations of every finished run, with the
  normalised score (`experiments.studies.suite_scores`: `0.5·R + 0.5` for POPGym, the success rate where a task
  reports one);
- over the suite of tasks that have a normalised score (of a partial study, those every compared backbone has
  finished a run on): the normalised MMER per task and backbone, its IQM, mean and median per backbone with
  95 % stratified bootstrap CIs, and P(X > Y), GTrXL against each other backbone first —
  `scores_suite.png`, `improvement_suite.png`.

The score of a run is its final evaluation's success rate where the task reports success, else
its final mean return (the final model's, `model.zip`; never `best_model.zip`'s); a run that diverged or
failed is scored by its last evaluation before it stopped (left out of the scores when it has none) and never
counts as solved. Each run's outcome (`outcome`) and best evaluation are listed beside its final score. See
`experiments.studies.stats` for the definitions. A run that `study.yaml` lists and that has no run directory
(`missing_runs`) is counted and named as missing, in the counts line and the Runs table, and never scored.

A report replaces its own earlier output and nothing else: `report.md` ends in a signature line, the SHA-256
digest of the text above it (`sign`), and a `report.md` without a valid one (the user's, or a report edited since)
is never replaced, nor a figure that the earlier report does not show (`report_target`); both are refused before
any work. The new `report.md` is written before its figures, so that every figure on disk is one the `report.md`
beside it shows, even after an interruption.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from envs.atomic import draw_figure, made_folders, write_together
from envs.rules import ConfigError, InputNotFoundError, Range, one_line, shown
from experiments.config import DEFAULT_REPS, REPS
from experiments.rules import PathName
from experiments.run_dir import owners_of
from experiments.studies import stats
from experiments.studies.plotting import curves_figure, group_colors, wrapped
from experiments.studies.runs import (
    DIVERGED,
    FAILED,
    FINISHED,
    INTERRUPTED,
    NEW,
    UNSUCCESSFUL,
    Run,
    counted,
    find_runs,
    listed_runs,
    read_study_record,
    slug,
    task_label,
    unreadable,
)
from experiments.studies.suite_scores import (
    RunScores,
    Suite,
    normalisation_name,
    normalised_score,
    run_scores,
    suite_matrices,
)

STATE_NAMES = {INTERRUPTED: "unfinished", NEW: "pending"}
SOLVED, SOLVED_THEN_LOST, NOT_SOLVED = "solved", "solved, then lost", "not solved"
"""the outcomes of a finished run (:func:`outcome`); a run that is not finished has its state's name"""
REFERENCE_BACKBONE = "gtrxl"
"""the backbone whose P(X > Y) against each other one the suite section states first"""


@dataclass
class ScoreStats:
    """Final-score statistics of one task, or of all tasks together."""

    scores: dict[str, np.ndarray]
    """backbone → ``(runs × tasks)`` final scores"""
    estimates: dict[str, dict[str, stats.Estimate]]
    improvement: dict[tuple[str, str], stats.Estimate]

    @classmethod
    def compute(cls, scores: dict[str, np.ndarray], reps: int, seed: int) -> ScoreStats:
        scores = {k: v for k, v in scores.items() if v.size}
        return cls(scores, stats.aggregate_estimates(scores, reps, seed) if scores else {},
                   stats.improvement_probabilities(scores, reps, seed))


@dataclass
class Reliability:
    """Reliability of one backbone on one task (Chan et al. 2020)."""

    runs: int
    finished: int
    diverged: int
    failed: int
    solved: int | None
    """finished runs that solve the task (``None`` for a task that has no threshold: :func:`solve_threshold`)"""
    solved_then_lost: int | None
    """finished runs that reached the threshold at an evaluation and ended below it (:func:`outcome`)"""
    iqr: float
    cvar: float
    worst: float
    lowest_after_solving: float | None
    """the lowest evaluation of any run after its first one at ≥ the threshold (collapse after solving)"""
    lowest_after_solving_stochastic: float | None
    """the same for the stochastic policy's evaluations (``None`` too where runs predate them)"""

    @property
    def with_result(self) -> int:
        return self.finished + self.diverged + self.failed


@dataclass
class Task:
    """Everything the report says about one task (an environment with its keyword arguments)."""

    label: str
    env: str
    success: bool
    """scored by success rate (else by mean return)"""
    threshold: float | None
    """the score that counts as solving the task (``None``: none, a task scored by return with no threshold
    given: :func:`solve_threshold`)"""
    runs: dict[str, list[Run]]
    """backbone → its runs"""
    stats: ScoreStats
    reliability: dict[str, Reliability]
    finished: dict[str, list[RunScores]]
    """backbone → the final and best evaluations of its finished runs, by seed"""
    threshold_given: float | None = None
    """the threshold the report was given (``None``: each run's own decision, :func:`outcome`)"""
    thresholds: tuple[float, ...] = ()
    """every run's threshold, where they differ (runs of several ``success_threshold`` values, no threshold given)"""

    @property
    def slug(self) -> str:
        return slug(self.label)

    @property
    def score_name(self) -> str:
        return "success rate" if self.success else "mean return"


def _score_matrix(runs: list[Run], success: bool) -> np.ndarray:
    values = [s for s in (run.score(success) for run in runs) if s is not None]
    return np.asarray(values, dtype=np.float64).reshape(-1, 1)


def solve_threshold(run: Run, success: bool, threshold: float | None) -> float | None:
    """The score that counts as solving `run`'s task: `threshold` where one is given (`--solve-threshold`), else
    the run's own `success_threshold` for a task scored by success rate, and none (`None`) for a task scored by
    mean return: a run's summary says whether it solved its task only by the success rate (`solved`)."""
    if threshold is not None:
        return threshold
    return float(run.config.get("success_threshold", 0.9)) if success else None


def _solved(run: Run, success: bool, threshold: float | None) -> bool:
    """Whether finished `run` solved its task: the run's own decision (its summary's `solved`) where no other
    `threshold` is given, else its final score ≥ `threshold`."""
    summary = run.summary or {}
    if threshold is None and summary.get("solved") is not None:
        return bool(summary["solved"])
    limit, score = solve_threshold(run, success, threshold), run.score(success)
    return limit is not None and score is not None and score >= limit


def outcome(run: Run, success: bool, threshold: float | None) -> str:
    """What became of a run: `SOLVED` (finished, and solved: the run's summary says so, or its final score ≥ a
    `threshold` given), `SOLVED_THEN_LOST` (finished unsolved after an evaluation of `evaluations.csv` at or above
    the threshold), `NOT_SOLVED`, `FINISHED` for a finished run of a task without a threshold
    (:func:`solve_threshold`), or, for a run that is not finished, its state (`diverged`, `failed`, `unfinished`,
    `pending`)."""
    state = run.state()
    if state != FINISHED:
        return STATE_NAMES.get(state, state)
    limit = solve_threshold(run, success, threshold)
    if limit is None:
        return FINISHED
    if _solved(run, success, threshold):
        return SOLVED
    _, values = run.curve(success)
    return SOLVED_THEN_LOST if bool(np.any(values >= limit)) else NOT_SOLVED


def best_score(run: Run, success: bool) -> float | None:
    """The run's best deterministic evaluation (success rate or mean return), its final one included; `None`
    when it has none."""
    _, values = run.curve(success)
    final = run.score(success) if run.state() == FINISHED else None
    finite = [float(v) for v in values if np.isfinite(v)] + ([final] if final is not None else [])
    return max(finite, default=None)


def reliability(runs: list[Run], success: bool, threshold: float | None) -> Reliability:
    """Outcomes (`outcome`), runs solved and dispersion of one group of runs; the counts of runs solved are
    `None` for a task without a threshold (scored by return, no `threshold` given: :func:`solve_threshold`)."""
    states = [run.state() for run in runs]
    scores = _score_matrix(runs, success).ravel()
    outcomes = [outcome(run, success, threshold) for run in runs]
    has_scores = scores.size > 0
    rated = success or threshold is not None
    return Reliability(
        runs=len(runs), finished=states.count(FINISHED), diverged=states.count(DIVERGED), failed=states.count(FAILED),
        solved=outcomes.count(SOLVED) if rated else None,
        solved_then_lost=outcomes.count(SOLVED_THEN_LOST) if rated else None,
        iqr=stats.iqr(scores) if has_scores else float("nan"),
        cvar=stats.cvar(scores) if has_scores else float("nan"),
        worst=float(scores.min()) if has_scores else float("nan"),
        lowest_after_solving=_lowest_after_solving(runs, success, threshold, stochastic=False),
        lowest_after_solving_stochastic=_lowest_after_solving(runs, success, threshold, stochastic=True))


def _lowest_after_solving(runs: list[Run], success: bool, threshold: float | None,
                          stochastic: bool) -> float | None:
    limits = ((run, solve_threshold(run, success, threshold)) for run in runs)
    lows = (run.lowest_after_solving(success, limit, stochastic) for run, limit in limits if limit is not None)
    return min((low for low in lows if low is not None), default=None)


@dataclass
class Study:
    """A study directory's runs, grouped by task and backbone, with its statistics."""

    directory: Path
    record: dict[str, Any]
    """``study.yaml`` (empty for a plain directory of runs)"""
    runs: list[Run]
    tasks: list[Task]
    overall: ScoreStats | None
    suite: Suite | None
    """the tasks with a normalised score (``None`` unless there are several tasks and one has it)"""
    suite_stats: ScoreStats | None
    """the suite's normalised MMER statistics (``None`` while no task can be compared)"""
    suite_final_stats: ScoreStats | None
    """the same statistics of the normalised final evaluation, which a run that lost what it learned scores low"""
    reps: int
    missing: dict[str, str] = field(default_factory=dict)
    """the runs `study.yaml` lists that have no run directory, by name (relative to the directory): why
    (`missing_runs`)"""
    unreadable: dict[str, str] = field(default_factory=dict)
    """the run directories the report cannot read, by name (relative to the directory): why (`Run.problem`)"""

    @property
    def unscored(self) -> dict[str, dict[str, str]]:
        """The runs no statistic counts, by what they are (`missing`, `unreadable`): name → why."""
        return {state: runs for state, runs in (("missing", self.missing), ("unreadable", self.unreadable)) if runs}

    @classmethod
    def analyse(cls, directory: Path, reps: int = DEFAULT_REPS, threshold: float | None = None,
                seed: int = 0, envs: list[str] | None = None) -> Study:
        """Read every run below `directory` and compute the statistics. `threshold` (the score
        that counts as solving a task) defaults to the runs' `success_threshold`; `envs`, shell
        patterns of env ids (`popgym-*`), keeps the runs of the envs that match one. A task scored by mean return
        has no threshold unless `threshold` is given (:func:`solve_threshold`). The runs the `study.yaml` files at
        and below `directory` list (`listed_runs`) that have no run directory (of the envs that match `envs`)
        are `missing` (:func:`missing_runs`), each named on one line of stderr."""
        check_analysis(reps, threshold, seed, envs)
        directory = Path(directory)
        record = read_study_record(directory)
        found = find_runs(directory)
        listed = listed_runs(directory)
        ordered = _ordered_runs(directory, listed, found)
        problems = unreadable(ordered, "report")
        runs = [run for run in ordered if run not in problems]
        skipped = {run.directory.relative_to(directory).as_posix(): problem for run, problem in problems.items()
                   if _env_matches(run.name, envs)}
        missing = missing_runs(directory, listed, found, envs)
        for name, why in missing.items():
            print(f"report: run {str(directory / name)!r}, which study.yaml lists, is missing ({why}); the report "
                  "counts it as missing and scores it nowhere", file=sys.stderr)
        if envs:
            runs = [run for run in runs if any(fnmatch.fnmatchcase(str(run.config.get("env")), p) for p in envs)]
        label = _backbone_labeller(runs)
        grouped: dict[str, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
        for run in runs:
            grouped[task_label(run.config)][label(run)].append(run)
        tasks = []
        for name, by_backbone in grouped.items():
            members = [run for group in by_backbone.values() for run in group]
            with_data = [run for run in members if run.summary is not None or run.evaluations]
            success = bool(with_data) and all(run.has_success() for run in with_data)
            task_threshold = solve_threshold(members[0], success, threshold)
            own = sorted({t for m in members if (t := solve_threshold(m, success, threshold)) is not None})
            scores = {backbone: _score_matrix(group, success) for backbone, group in by_backbone.items()}
            finished = {b: sorted((s for s in map(run_scores, g) if s is not None), key=lambda s: s.seed)
                        for b, g in by_backbone.items()}
            tasks.append(Task(name, str(members[0].config.get("env", "?")), success, task_threshold,
                              dict(by_backbone), ScoreStats.compute(scores, reps, seed),
                              {b: reliability(g, success, threshold) for b, g in by_backbone.items()}, finished,
                              threshold, tuple(own) if len(own) > 1 else ()))
        suite, final = _suite(tasks), _suite(tasks, final=True)
        suite_stats, final_stats = (ScoreStats.compute(s.scores, reps, seed) if s is not None and s.tasks else None
                                    for s in (suite, final))
        return cls(directory, record, runs, tasks, _overall(tasks, reps, seed), suite, suite_stats, final_stats, reps,
                   missing, skipped)


def _ordered_runs(directory: Path, listed: list[str], runs: list[Run]) -> list[Run]:
    """The `runs` found below `directory` in `study.yaml`'s order (the grid's), then any other one."""
    found = {run.directory.relative_to(directory).as_posix(): run for run in runs}
    order = [name for name in listed if name in found] + [name for name in found if name not in listed]
    return [found[name] for name in order]


def missing_runs(directory: Path, listed: list[str], found: list[Run], envs: list[str] | None = None) -> dict[str, str]:
    """The runs of `listed` (`study.yaml`'s, relative to `directory`) that are not among the run directories
    `found` there, in `study.yaml`'s order, each with why: `no directory`, or `no config.yaml` in the directory
    that is there. With `envs` (shell patterns of env ids), only those whose name's env (`{env}__...`, as
    `env_slug` spells it) matches one."""
    have = {run.directory.relative_to(directory).as_posix() for run in found}
    missing = {}
    for name in listed:
        if name not in have and _env_matches(name.rsplit("/", 1)[-1], envs):
            missing[name] = "no config.yaml" if (directory / name).is_dir() else "no directory"
    return missing


def _env_matches(run_name: str, envs: list[str] | None) -> bool:
    """Whether the env of a run named `{env}__...` (as `env_slug` spells it) matches one of `envs` (shell patterns
    of env ids; any env without them)."""
    env = run_name.split("__", 1)[0]
    return not envs or any(fnmatch.fnmatchcase(env, p) or fnmatch.fnmatchcase(env, _slug_pattern(p)) for p in envs)


def _slug_pattern(pattern: str) -> str:
    """A shell pattern of env ids as `env_slug` spells the env in a run's name (its wildcards kept)."""
    return re.sub(r"[^A-Za-z0-9._*?!\[\]-]+", "-", pattern)


def _backbone_labeller(runs: list[Run]) -> Callable[[Run], str]:
    """Label runs by backbone (by algorithm and backbone when the study has several algorithms), and tell variants
    apart: where runs of one task, algorithm and backbone differ in a setting, every run of that algorithm and
    backbone is labelled with its values of those settings, e.g. ``gtrxl d_model=128 n_layers=2``. A setting that
    some runs do not record (their configuration predates its section) tells nothing apart."""
    several_algos = len({run.config.get("algo") for run in runs}) > 1

    def base(run: Run) -> str:
        return f"{run.config.get('algo')}-{run.config.get('backbone')}" if several_algos else str(
            run.config.get("backbone"))

    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        groups[base(run), task_label(run.config)].append(_settings(run.config))
    varying: dict[str, set[str]] = defaultdict(set)
    for (name, _), settings in groups.items():
        varying[name] |= {key for key in set().union(*settings)
                          if all(key in s for s in settings) and len({repr(s[key]) for s in settings}) > 1}

    def label(run: Run) -> str:
        name, settings = base(run), _settings(run.config)
        keys = sorted(varying[name])
        return " ".join([name, *(f"{key.split('.', 1)[-1]}={_shown(settings.get(key))}" for key in keys)])

    return label


VARIANT_FIELDS = ("n_envs", "precision", "success_threshold")
"""run settings whose runs a report keeps apart: the env copies, the arithmetic, the bar of 'solved'"""


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings that make a variant of a run's algorithm and backbone, as dotted keys: its learner's and
    backbone's sections, the policy's options, and the run settings that change what is learned or how it is
    scored (`VARIANT_FIELDS`)."""
    flat = {key: config.get(key) for key in VARIANT_FIELDS if key in config}
    for section in ("policy", config.get("algo"), config.get("backbone")):
        for key, value in (config.get(section) or {}).items():
            flat[f"{section}.{key}"] = value
    return flat


def _shown(value: Any) -> str:
    """`value` as YAML spells it in a label (`null`, `true`), everything else as `str` does."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def check_analysis(reps: Any, threshold: Any, seed: Any, envs: Any,
                   names: tuple[str, str, str, str] = ("reps", "threshold", "seed", "envs")) -> None:
    """`ConfigError` naming the argument (`names`: how a message names each) that an analysis cannot take: bootstrap
    resamples `reps` (`REPS`), `threshold` (a finite number, or `None`), `seed` (one NumPy takes), `envs`
    (env id patterns: a list of strings, or `None`)."""
    REPS.check(names[0], reps)
    if threshold is not None:
        Range().check(names[1], threshold)
    Range(0, 2**32 - 1, integer=True).check(names[2], seed)
    if envs is not None and (isinstance(envs, str) or not isinstance(envs, list | tuple)
                             or not all(isinstance(pattern, str) and pattern for pattern in envs)):
        raise ConfigError(f"{names[3]}={shown(envs)}: expected a list of env id patterns, e.g. ['popgym-*']")


def _overall(tasks: list[Task], reps: int, seed: int) -> ScoreStats | None:
    """All tasks together: only when there are several, every one scored by success rate (on the
    same [0, 1] scale) and every backbone has as many scored runs on each (rliable's matrices)."""
    if len(tasks) < 2 or not all(task.success for task in tasks):
        return None
    backbones = [b for b in tasks[0].stats.scores if all(b in t.stats.scores for t in tasks)]
    matrices = {}
    for backbone in backbones:
        columns = [task.stats.scores[backbone][:, 0] for task in tasks]
        if len({c.size for c in columns}) != 1:
            return None
        matrices[backbone] = np.stack(columns, axis=1)
    return ScoreStats.compute(matrices, reps, seed) if matrices else None


def _suite(tasks: list[Task], final: bool = False) -> Suite | None:
    """The suite of the tasks with a normalised score (of the best evaluation, or with `final` of the final one),
    when there are several tasks and one has it."""
    if len(tasks) < 2 or not any(normalisation_name(task.env, task.success) for task in tasks):
        return None
    return suite_matrices({
        task.label: {b: [(s.seed, s.normalised(task.env, final)) for s in runs] for b, runs in task.finished.items()}
        if normalisation_name(task.env, task.success) else None for task in tasks})


# --------------------------------------------------------------------------------------------
# figures


def scores_figure(title: str, score_stats: ScoreStats, score_name: str) -> Figure:
    """Mean, median and IQM with their CIs per backbone (rliable's interval plot), and every run;
    `score_name` says which score (`final success rate`)."""
    names = list(score_stats.scores)
    colors = group_colors(names)
    labels = [wrapped(name) for name in names]
    lines = sum(max(1.0, 0.6 * (label.count("\n") + 1)) for label in labels)
    figure = Figure(figsize=(12, 0.5 * lines + 1.8), layout="constrained")
    axes = figure.subplots(1, 4, sharey=True)
    rows = np.arange(len(names))
    for ax, aggregate in zip(axes, stats.AGGREGATES, strict=False):
        for row, name in zip(rows, names, strict=True):
            estimate = score_stats.estimates[name][aggregate]
            ax.barh(row, estimate.high - estimate.low, left=estimate.low, height=0.6, color=colors[name], alpha=0.6)
            ax.vlines(estimate.value, row - 0.3, row + 0.3, color="k", lw=1.5)
        ax.set_title(aggregate.upper() if aggregate == "iqm" else aggregate.capitalize())
    rng = np.random.default_rng(0)
    for row, name in zip(rows, names, strict=True):
        values = score_stats.scores[name].ravel()
        axes[3].scatter(values, row + rng.uniform(-0.2, 0.2, values.size), s=14, color=colors[name])
    axes[3].set_title("every run")
    axes[0].set_yticks(rows, labels)
    axes[0].invert_yaxis()
    everything = np.concatenate([*(m.ravel() for m in score_stats.scores.values()),
                                 *([e.low, e.high] for b in score_stats.estimates.values() for e in b.values())])
    low, high = everything.min(), everything.max()
    margin = 0.05 * (high - low) or 0.05
    for ax in axes:
        ax.set_xlim(low - margin, high + margin)
        ax.set_xlabel(score_name)
        ax.grid(axis="x", alpha=0.3)
    figure.suptitle(f"{title}: {score_name}, 95 % stratified bootstrap CIs")
    return figure


def improvement_figure(title: str, score_stats: ScoreStats) -> Figure:
    """P(row > column) for every pair of backbones."""
    names = list(score_stats.scores)
    matrix = np.full((len(names), len(names)), np.nan)
    for (x, y), estimate in score_stats.improvement.items():
        matrix[names.index(x), names.index(y)] = estimate.value
    labels = [wrapped(name) for name in names]
    multiline = any("\n" in label for label in labels)  # long names (a variant's settings): numbered, columns too
    if multiline:
        labels = [f"{i}: {label}" for i, label in enumerate(labels, 1)]
    longest = max(len(line) for label in labels for line in label.split("\n"))
    row = max(0.9, 0.2 * max(label.count("\n") + 1 for label in labels))
    figure = Figure(figsize=(1.1 * len(names) + 1.5 + 0.08 * longest, row * len(names) + 1.5), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(matrix, cmap="RdBu", vmin=0, vmax=1, aspect="auto" if multiline else None)
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if abs(value - 0.5) > 0.3 else "black")
    ax.set_xticks(range(len(names)), [str(i) for i in range(1, len(names) + 1)] if multiline else names,
                  rotation=0 if multiline else 30, ha="center" if multiline else "right")
    ax.set_yticks(range(len(names)), labels)
    ax.set(xlabel="Y", ylabel="X", title=f"{title}: P(X > Y)")
    figure.colorbar(image, ax=ax, fraction=0.046)
    return figure


# --------------------------------------------------------------------------------------------
# markdown


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _format_number(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{value:.3f}"


def _score_section(title: str, key: str, score_stats: ScoreStats, score_name: str,
                   figures: dict[str, Figure]) -> list[str]:
    """Score table, P(improvement) table and their figures (added to `figures`); `score_name` says which score
    (`final success rate`)."""
    if not score_stats.scores:
        return ["No run has a score yet.", ""]
    figures[f"scores_{key}.png"] = scores_figure(title, score_stats, score_name)
    rows = []
    for name, matrix in score_stats.scores.items():
        estimate = score_stats.estimates[name]
        runs = matrix.shape[0] if matrix.shape[1] == 1 else f"{matrix.shape[0]} × {matrix.shape[1]} tasks"
        rows.append([name, runs, estimate["mean"], _format_number(float(np.std(matrix))), estimate["median"],
                     estimate["iqm"]])
    lines = [f"{score_name[0].upper()}{score_name[1:]}: point estimate [95 % CI].", "",
             *_table(["backbone", "runs", "mean", "std", "median", "IQM"], rows), "",
             f"![{score_name}](scores_{key}.png)", ""]
    if score_stats.improvement:
        figures[f"improvement_{key}.png"] = improvement_figure(title, score_stats)
        names = list(score_stats.scores)
        matrix = [[x, *("–" if x == y else score_stats.improvement[x, y] for y in names)] for x in names]
        lines += ["Probability of improvement P(row > column) [95 % CI]:", "",
                  *_table(["X \\ Y", *names], matrix), "", f"![probability of improvement](improvement_{key}.png)", ""]
    return lines


def _task_section(task: Task, figures: dict[str, Figure], reps: int, seed: int) -> list[str]:
    figures[f"curves_{task.slug}.png"] = curves_figure(task.runs, task.success, task.label, reps, seed)
    lines = [f"## {task.label}", "", f"Score: final **{task.score_name}**.", "",
             f"![learning curves](curves_{task.slug}.png)", "", "### Final scores", "",
             *_score_section(task.label, task.slug, task.stats, f"final {task.score_name}", figures),
             *_evaluations_section(task), "### Reliability", ""]
    rows = []
    for backbone, rel in task.reliability.items():
        share = "–" if rel.solved is None else f"{rel.solved}/{rel.with_result}"
        if rel.solved is not None and rel.with_result:
            share += f" ({rel.solved / rel.with_result:.0%})"
        lost = "–" if rel.solved_then_lost is None else rel.solved_then_lost
        rows.append([backbone, rel.runs, rel.finished, share, lost, rel.diverged, rel.failed,
                     rel.runs - rel.with_result, *map(_format_number, (rel.iqr, rel.cvar, rel.worst)),
                     *("–" if low is None else _format_number(low)
                       for low in (rel.lowest_after_solving, rel.lowest_after_solving_stochastic))])
    if task.threshold is None:
        lines += ["Scored by mean return, with no threshold that counts as solving the task (give "
                  "--solve-threshold): no run is counted solved or not solved.", ""]
    solved = ("solved" if task.threshold is None else
              f"solved (≥ its run's success_threshold: {', '.join(f'{t:g}' for t in task.thresholds)})"
              if task.thresholds else f"solved (≥ {task.threshold:g})")
    lines += _table(["backbone", "runs", "finished", solved, "solved, then lost",
                     "diverged", "failed", "unfinished", "IQR", "CVaR 25 %", "worst", "lowest after solving",
                     "lowest after solving, stochastic policy"], rows)
    return [*lines, ""]


def _mean_std(values: list[float]) -> str:
    """`mean ± std` (the standard deviation over seeds, `ddof=0` as everywhere in the report)."""
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def _seed_values(scores: list[RunScores], value: Callable[[RunScores], float | None]) -> str:
    """`mean ± std (seed: value, ...)` over the finished runs, each run once (two runs of one seed, from two studies
    below the directory, are two values); – when none has a value."""
    values = [(s.seed, v) for s in scores if (v := value(s)) is not None]
    if not values:
        return "–"
    seeds = ", ".join(f"{seed}: {_format_number(v)}" for seed, v in values)
    return f"{_mean_std([v for _, v in values])} ({seeds})"


def _runs_in(task: Task, backbone: str) -> str:
    """`finished/runs` of one backbone on one task."""
    return f"{len(task.finished.get(backbone, []))}/{len(task.runs.get(backbone, []))}"


def _evaluations_section(task: Task) -> list[str]:
    """Final and best (MMER) deterministic evaluations of the finished runs, normalised where the task has it."""
    normalisation = normalisation_name(task.env, task.success)
    columns: dict[str, Callable[[RunScores], float | None]] = {"final return": lambda s: s.final_return}
    if normalisation is not None and not task.success:  # POPGym: each return with its normalised score beside it
        columns["final, normalised"] = lambda s: normalised_score(task.env, s.final_return, s.final_success)
    columns["best return (MMER)"] = lambda s: s.best_return
    if task.success:
        columns |= {"final success rate": lambda s: s.final_success, "best success rate": lambda s: s.best_success}
    elif normalisation is not None:
        columns[f"normalised MMER ({normalisation})"] = lambda s: s.normalised(task.env)
    rows = [[backbone, _runs_in(task, backbone), *(_seed_values(task.finished[backbone], column)
                                                   for column in columns.values())] for backbone in task.runs]
    note = "" if normalisation is None else f" The suite aggregates the task's normalised score: {normalisation}."
    return ["### Final and best evaluations", "",
            "Finished runs only: mean ± std over seeds (each seed's value in brackets); best is the highest of the "
            "run's deterministic evaluations, the final one included (POPGym's MMER)." + note, "",
            *_table(["backbone", "finished", *columns], rows), ""]


def _suite_section(study: Study, figures: dict[str, Figure]) -> list[str]:
    """The normalised MMER of every task and backbone, the tasks left out, and the suite's aggregates."""
    suite = study.suite
    assert suite is not None
    backbones = list(dict.fromkeys(b for task in study.tasks for b in task.runs))
    rows = []
    for task in study.tasks:
        cells = [_mean_std_cell(task, b) if b in task.runs else "–" for b in backbones]
        rows.append([task.label, *cells, "yes" if task.label in suite.tasks else f"no: {suite.left_out[task.label]}"])
    lines = ["## Suite: normalised MMER", "",
             "Each finished run's best deterministic evaluation (MMER), normalised to [0, 1]: 0.5·R + 0.5 for a "
             "POPGym task (returns in [-1, 1]), as in the POPGym paper (Morad et al. 2023); the best success rate "
             "for a task that reports one (MiniGrid Memory, T-Maze): its return, though in [0, 1], stays below 1 for "
             "a perfect agent by a step penalty that depends on the maze, while the success rate is the share of "
             "episodes solved. Tasks with neither are left out. The MMER, a maximum over noisy evaluations, is biased "
             "upwards (as POPGym's is): each task's table gives the final evaluation beside it. Per task: mean ± std "
             "over finished seeds (finished/runs).", "",
             *_table(["task", *backbones, "in the aggregate"], rows), ""]
    if suite.not_compared:
        lines += [f"Not compared (no finished run yet on a task with a normalised score): "
                  f"{', '.join(suite.not_compared)}.", ""]
    if suite.set_aside:
        lines += ["Set aside from the aggregate, to keep the tasks the others share (finished on fewer tasks): "
                  + ", ".join(f"{b} ({n} {'task' if n == 1 else 'tasks'})" for b, n in suite.set_aside.items())
                  + ".", ""]
    lines += _unscored_lines(study)
    if study.suite_stats is None:
        return [*lines, "No task has a finished run of every compared backbone yet: no aggregate.", ""]
    lines += [f"Aggregates over {len(suite.tasks)} of {len(study.tasks)} tasks, every (task, seed) score of a "
              "backbone pooled; the bootstrap resamples seeds within each task. A backbone's matrix holds the same "
              "number of runs on every task (its lowest seeds), as rliable's stratified bootstrap needs."
              + "".join(f" {b}: {n} finished {'run' if n == 1 else 'runs'} left out to balance."
                        for b, n in suite.unbalanced.items()), "",
              *_score_section("suite", "suite", study.suite_stats, "normalised MMER", figures)]
    reference = [(y, estimate) for (x, y), estimate in study.suite_stats.improvement.items()
                 if x == REFERENCE_BACKBONE]
    if reference:
        lines += [*(f"- P({REFERENCE_BACKBONE} > {y}) = {estimate}" for y, estimate in reference), ""]
    if study.suite_final_stats is not None:
        lines += ["### Suite: normalised final evaluation", "",
                  "The same aggregates of each run's final evaluation, normalised the same way (0.5·R + 0.5, the final "
                  "success rate): a run that learned and then lost it scores its loss here, its peak above.", "",
                  *_score_section("suite, final evaluation", "suite_final", study.suite_final_stats,
                                  "normalised final evaluation", figures)]
    return lines


def _mean_std_cell(task: Task, backbone: str) -> str:
    """`mean ± std (finished/runs)` of the normalised MMER of one backbone's finished runs on one task."""
    values = [v for s in task.finished[backbone] if (v := s.normalised(task.env)) is not None]
    return (f"{_mean_std(values)} " if values else "") + f"({_runs_in(task, backbone)})"


def _unscored_lines(study: Study) -> list[str]:
    """The runs that are not finished, by state (listed, never scored)."""
    by_state: dict[str, list[str]] = {state: [] for state in (*UNSUCCESSFUL, INTERRUPTED, NEW)}
    for run in study.runs:
        state = run.state()
        if state != FINISHED:
            by_state[state].append(run.directory.relative_to(study.directory).as_posix())
    listed = [f"{STATE_NAMES.get(state, state)} ({len(names)}): {', '.join(names)}"
              for state, names in by_state.items() if names]
    return ["Not scored (not finished): " + "; ".join(listed) + ".", ""] if listed else []


def retries(run: Run) -> int:
    """Times the run was retried after its worker or node was lost (`status.json`, written by a study)."""
    return int((run.status or {}).get("retries", 0))


def _runs_section(study: Study) -> list[str]:
    """Every run: those found, then those no statistic counts (`Study.unscored`)."""
    rows = []
    for run in study.runs:
        summary = run.summary or {}
        task = next(task for task in study.tasks if task.label == task_label(run.config))
        score, best = run.score(task.success), best_score(run, task.success)
        state = run.state()
        rows.append([run.directory.relative_to(study.directory).as_posix(), STATE_NAMES.get(state, state),
                     run.timesteps(), retries(run), "–" if score is None else f"{score:.3f}",
                     "–" if best is None else f"{best:.3f}",
                     _outcome_cell(run, task) if state == FINISHED else "–",
                     summary.get("wall_seconds", "–"), rate_shown(summary),
                     run.error().splitlines()[0][:100] if run.error() else ""])
    rows += [[name, state, *["–"] * 7, f"listed in study.yaml; {why}" if state == "missing" else why]
             for state, runs in study.unscored.items() for name, why in runs.items()]
    header = ["run", "state", "steps", "retries", "score", "best", "outcome", "wall s", "steps/s", "message"]
    legend = ("Score: the final evaluation (of model.zip); best: the highest deterministic evaluation, the final one "
              "included; outcome of a finished run: solved, solved, then lost, or not solved (– on a task scored by "
              "return, which has no threshold unless --solve-threshold gives one); steps/s: – where the command that "
              "finished the run had nothing left to train."
              + (" Missing: a run study.yaml lists that has no run directory; no statistic counts it."
                 if study.missing else "")
              + (" Unreadable: a run directory whose files the report cannot read (the message says which); no "
                 "statistic counts it." if study.unreadable else ""))
    return ["## Runs", "", legend, "", *_table(header, rows), ""]


def trained_nothing(summary: dict[str, Any]) -> bool:
    """Whether the command that wrote `summary` trained no step: it resumed from a checkpoint at the budget."""
    return summary.get("resumed_from") is not None and summary.get("env_steps") == summary["resumed_from"]


def rate_shown(summary: dict[str, Any]) -> str:
    """A summary's steps per second as the Runs table shows it: – where it has none, or its command trained
    nothing (a rate of 0 that says nothing of the run)."""
    rate = summary.get("steps_per_second")
    return "–" if rate is None or trained_nothing(summary) else str(rate)


def _outcome_cell(run: Run, task: Task) -> str:
    """The outcome of a finished run in the Runs table: – where its task has no threshold."""
    shown = outcome(run, task.success, task.threshold_given)
    return "–" if shown == FINISHED else shown


def _retries_sentence(runs: list[Run]) -> str:
    """` N retries of M runs after a lost worker or node.` (empty when none was retried)."""
    counts = [retries(run) for run in runs if retries(run)]
    if not counts:
        return ""
    return (f" {sum(counts)} {'retry' if sum(counts) == 1 else 'retries'} of {len(counts)} "
            f"{'run' if len(counts) == 1 else 'runs'} after a lost worker or node (see the Runs table).")


def _unscored_names(runs: dict[str, str], most: int = 5) -> str:
    """`name: why; ...` of the first `most` runs no statistic counts, then how many more the Runs table names."""
    names = [f"{name}: {one_line(why)}" for name, why in list(runs.items())[:most]]
    more = len(runs) - most
    return "; ".join(names) + (f"; {more} more in the Runs table" if more > 0 else "")


def render(study: Study, figures: dict[str, Figure], seed: int = 0) -> str:
    """The markdown of `report.md`; its figures are added to `figures`, by the file name it shows them by."""
    states = [run.state() for run in study.runs]
    counts = {STATE_NAMES.get(s, s): states.count(s) for s in (FINISHED, *UNSUCCESSFUL, INTERRUPTED, NEW)}
    name = study.record.get("name", study.directory.name)
    shown = [f"{n} {state}" for state, n in counts.items() if n]
    shown += [f"{len(runs)} {state} ({_unscored_names(runs)})" for state, runs in study.unscored.items()]
    lines = [f"# Seed study: {name}", "",
             f"{counted(len(study.runs) + sum(map(len, study.unscored.values())), 'run')}: "
             + ", ".join(shown) + "." + _retries_sentence(study.runs), ""]
    commands = study.record.get("commands", [])
    if commands:
        lines += ["Produced by:", "", "```",
                  *dict.fromkeys(entry["command"] for entry in commands), "```", ""]
    lines += [
        "Scores are each run's final evaluation (success rate where the task reports success, else mean return), "
        "the final model's (model.zip), not the best evaluation's (best_model.zip); a run that diverged or failed is "
        "scored by its last evaluation before it stopped and never counts as solved. A finished run that reached the "
        "threshold at an evaluation and ended below it is \"solved, then lost\": it counts among the runs not "
        "solved, and each run's best evaluation is listed beside its final one (Runs). "
        "Intervals are 95 % percentile CIs of a stratified bootstrap over runs "
        f"({study.reps} resamples; Agarwal et al. 2021). IQM is the mean of the middle 50 % of scores; "
        "P(X > Y) the probability that a run of X scores higher than a run of Y (ties count ½). "
        "IQR and CVaR 25 % (mean of the worst quarter of final scores) measure dispersion and risk "
        "across runs (Chan et al. 2020). Scores are of the deterministic policy (the most probable action); "
        "\"lowest after solving\" is the lowest evaluation of any run after its first one at the threshold, and "
        "its stochastic twin the same for the policy that samples its actions, as in training (– where the runs "
        "predate that evaluation).", ""]
    for task in study.tasks:
        lines += _task_section(task, figures, study.reps, seed)
    if study.overall is not None:
        lines += ["## All tasks", "", "Success rates of every task pooled (runs × tasks, stratified by task).", "",
                  *_score_section("all tasks", "all", study.overall, "final success rate", figures)]
    elif len(study.tasks) > 1 and all(task.success for task in study.tasks):
        backbones = list(dict.fromkeys(b for task in study.tasks for b in task.stats.scores))
        counts = "; ".join(f"{b} " + "/".join(str(len(task.stats.scores.get(b, ()))) for task in study.tasks)
                           for b in backbones)
        lines += ["## All tasks", "", "Not pooled: pooling needs each backbone scored on every task by as many runs "
                  f"(scored runs per task, {' / '.join(task.label for task in study.tasks)}: {counts}).", ""]
    if study.suite is not None:
        lines += _suite_section(study, figures)
    lines += _runs_section(study)
    lines += [f"_Generated {time.strftime('%Y-%m-%d %H:%M:%S')} from the run directories by "
              f"`train_rl.py report`._", ""]
    return "\n".join(lines)


def build_report(study_dir: str | Path, out_dir: str | Path | None = None, reps: int = DEFAULT_REPS,
                 threshold: float | None = None, seed: int = 0, envs: list[str] | None = None,
                 arguments: tuple[str, str] = ("study_dir", "out_dir")) -> Path:
    """Analyse `study_dir` (the runs of `envs` only, if given: see `Study.analyse`) and write
    `report.md` and its figures to `out_dir` (default: the study directory; required with `envs`, so
    that a report of some tasks never replaces the study's own). Returns the path of `report.md`.

    A report replaces its own earlier output there (`report_target`) and no other file, and is never written into
    a run directory, nor into another study's (`check_report_place`): `ConfigError` naming the directory's argument
    (`arguments`: the names of `study_dir` and `out_dir` in messages) before anything is written, also when the
    runs found are none that a report can read (`check_readable`), or when an argument is of another type."""
    PathName().check(arguments[0], study_dir)
    if out_dir is not None:
        PathName().check(arguments[1], out_dir)
    check_analysis(reps, threshold, seed, envs)
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise InputNotFoundError(f"{arguments[0]}={str(study_dir)!r}: expected a study directory; this "
                       f"{'is a file' if study_dir.exists() else 'does not exist'}")
    if envs and out_dir is None:
        raise ConfigError(f"{arguments[1]}=None: a report of some of the tasks (envs={shown(envs)}) needs an "
                          f"{arguments[1]}, so that it does not replace the study's own")
    directory = Path(out_dir) if out_dir is not None else study_dir
    argument = arguments[1] if out_dir is not None else arguments[0]
    check_report_place(out_dir, study_dir, arguments)
    report_target(directory, argument)  # before the analysis: refused at once
    found = find_runs(study_dir)
    if not found:
        raise InputNotFoundError(f"{arguments[0]}={str(study_dir)!r}: no run directory (with a config.yaml) below it")
    check_readable(found, "report", arguments[0], study_dir)
    every = sorted({str(run.config.get("env")) for run in found if run.problem() is None})
    if envs and not any(fnmatch.fnmatchcase(env, pattern) for env in every for pattern in envs):
        raise InputNotFoundError(f"--env {' '.join(envs)}: no run of a matching env below {str(study_dir)!r}; "
                       f"its envs: {', '.join(every)}")
    study = Study.analyse(study_dir, reps, threshold, seed, envs)
    figures: dict[str, Figure] = {}
    text = sign(render(study, figures, seed))
    before = report_target(directory, argument)  # again: the analysis took a while
    foreign = [name for name in figures if os.path.lexists(directory / name) and not (
        name in before and (directory / name).is_file() and not (directory / name).is_symlink())]
    if foreign:
        raise ConfigError(f"{argument} {str(directory)!r}: holds {foreign[0]!r}"
                          + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                          + f", which the report would write and did not write itself; {_NEVER_REPLACED} "
                          f"{_elsewhere(argument)}")
    path = directory / "report.md"
    with made_folders(directory):  # gone again when nothing fits in it
        writers = {directory / name: partial(draw_figure, figure) for name, figure in figures.items()}
        write_together({**writers, path: lambda tmp: tmp.write_text(text)})  # report.md last: its figures are there
        for stale in before - set(figures):  # a task or backbone gone since: its figures go with it
            (directory / stale).unlink(missing_ok=True)
    return path


SIGNATURE = "<!-- written by train_rl.py report, sha256 {digest}: rebuilt only while this line and the text above it " \
            "are as written -->"
"""the last line of a `report.md` the report wrote: the SHA-256 digest of the text above it"""
_SIGNED = re.compile(r"(.*\n)<!-- written by train_rl\.py report, sha256 ([0-9a-f]{64}): [^\n]*-->\n?", re.DOTALL)
_UNSIGNED = re.compile(r"# Seed study: .*\n_Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d from the run directories by "
                       r"`train_rl\.py report`\._\n*", re.DOTALL)
"""an unsigned report of the report's own layout: its title first, its `_Generated ..._` line last"""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sign(text: str) -> str:
    """`text` (a rendered report) with its `SIGNATURE` line last."""
    return text + SIGNATURE.format(digest=_digest(text)) + "\n"


def is_own_report(text: str) -> bool:
    """Whether `text` is a `report.md` a report wrote and nobody has edited since: signed with the digest of the text
    above the signature, or (unsigned) a `# Seed study` page that ends in its
    `_Generated ... by train_rl.py report._` line."""
    signed = _SIGNED.fullmatch(text)
    if signed is not None:
        return _digest(signed.group(1)) == signed.group(2)
    return _UNSIGNED.fullmatch(text) is not None


_NEVER_REPLACED = "a file the report did not write is never replaced: move it away, or give"


def _elsewhere(argument: str) -> str:
    """Where else a report can go, after `_NEVER_REPLACED`: another `--out` (`out_dir`), one at all, or none (a
    study's own report)."""
    if argument == "out_dir":
        return "another out_dir"
    if argument == "study":
        return "--no-report (then train_rl.py report DIR --out ELSEWHERE)"
    return "another --out DIR" if argument.startswith("-") else "--out DIR"


def check_report_place(out_dir: str | Path | None, study_dir: str | Path,
                       arguments: tuple[str, str] = ("study_dir", "out_dir")) -> None:
    """Refuse (`ConfigError`, one line naming the argument, its value and the owner) a report directory `out_dir`
    at or inside a run directory, or inside a study or tune study directory other than `study_dir`, the one
    reported (`experiments.run_dir.owners_of`): the report's files would mix with theirs, and a report or `plot`
    of the owner would read them. At or below the reported directory, where a report goes by default
    (`out_dir` `None`), is its own unless a run directory holds it. `arguments` names `study_dir` and `out_dir`.
    Changes nothing."""
    path = Path(os.path.realpath(study_dir if out_dir is None else out_dir))
    reported = Path(os.path.realpath(study_dir))
    for owner, kind, marker in owners_of(path):
        if kind != "run directory" and owner == reported:
            return  # the reported study's own folder (or a folder in it)
        where = f"is the {kind}" if owner == path else f"would be inside the {kind}"
        why = ("whose files a report would mix with" if kind == "run directory"
               else f"which is not the directory reported ({str(study_dir)!r})")
        given = (f"{arguments[0]}={str(study_dir)!r} without {arguments[1]}" if out_dir is None
                 else f"{arguments[1]}={str(out_dir)!r}")
        raise ConfigError(f"{given}: the report directory {str(path)!r} {where} {str(owner)!r} ({marker}), "
                          f"{why}; choose {arguments[1]} outside it")


def report_target(directory: Path, argument: str) -> set[str]:
    """The figures of the report already in `directory` (none without a `report.md`), which a new report there
    may replace. `ConfigError` naming `argument` and `directory` when its `report.md` is not one a report wrote
    (`is_own_report`: the user's, a report edited since, a link, a folder): a file the report did not write is never
    replaced."""
    path = Path(directory) / "report.md"
    if not os.path.lexists(path):
        return set()
    text = None
    if path.is_file() and not path.is_symlink():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = path.read_text(encoding="utf-8")
    if text is None or not is_own_report(text):
        raise ConfigError(f"{argument} {str(directory)!r}: holds a report.md that train_rl.py report did not write "
                          f"(or that was edited since); {_NEVER_REPLACED} {_elsewhere(argument)}")
    return _figures(text)


RUN_EXPECTED = "a training run's directory (a config.yaml naming algo, backbone and env) or a directory holding them"
"""what `plot` and `report` read"""


def check_readable(runs: list[Run], command: str, argument: str, directory: Path) -> None:
    """`ConfigError`, one line naming `argument`, `directory`, why and `RUN_EXPECTED`, when `runs` (those found at or
    below `directory`) hold none that `command` can read (a language-model run, a damaged config.yaml). When some
    can be read, `readable` names each of the others as it skips it."""
    problems = []
    for run in runs:
        problem = run.problem()
        if problem is None:
            return
        problems.append((run, problem))
    if not problems:
        why = "no config.yaml at or below it"
    elif len(problems) == 1 and problems[0][0].directory == directory:
        why = one_line(problems[0][1])
    else:
        run, problem = problems[0]
        why = f"{str(run.directory)!r}: {one_line(problem)}" + (
            f" (and {len(problems) - 1} more runs it cannot read)" if len(problems) > 1 else "")
    raise ConfigError(f"{argument} {str(directory)!r} holds no run that {command} can read: {why}; "
                      f"expected {RUN_EXPECTED}")


def _figures(report: str) -> set[str]:
    """The file names of the report's own figures that `report` links (`curves_*`, `scores_*`, `improvement_*`)."""
    return set(re.findall(r"!\[[^\]]*\]\(((?:curves|scores|improvement)_[^/)]+\.png)\)", report))
