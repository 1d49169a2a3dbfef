"""Statistics of a seed study: aggregate scores with bootstrap confidence intervals and the
reliability measures of Chan et al. 2020. Pure numpy / rliable; no files.

Scores are arranged as rliable wants them: one `(runs × tasks)` matrix per backbone.

- **IQM** (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice"): the mean of
  the middle 50 % of all scores, `mean(sorted(x)[⌊n/4⌋ : n − ⌊n/4⌋])` (rliable's
  `aggregate_iqm`, scipy's 25 % trimmed mean) — robust to outlier runs, yet more efficient than
  the median.
- **Stratified bootstrap CIs** (ibid.): resample runs with replacement *within* each task, recompute
  the statistic, and take the 2.5 / 97.5 percentiles of the replicates (95 % percentile interval).
- **Probability of improvement** P(X > Y) (ibid.): the Mann–Whitney U statistic over all run pairs,
  `(#{x_i > y_j} + ½ #{x_i = y_j}) / (n m)`, averaged over tasks.
- **Dispersion across runs** (Chan et al. 2020, "Measuring the Reliability of RL Algorithms"): the
  interquartile range `P75 − P25` of the final scores.
- **Risk across runs** (ibid.): the conditional value at risk of the lower tail of the final scores,
  the mean of their worst α = 25 % (see `cvar`).

rliable pitfalls handled here: `metrics.aggregate_median` is the median over *tasks* of the per-task
means (so with one task it is the mean), hence `median` pools all scores instead; and the
bootstrap draws from numpy's *global* generator (its `random_state` is not used for the indices),
hence `seeded`. IQM and P(X > Y) are computed in numpy with rliable's definitions: scipy's
`trim_mean` and `mannwhitneyu` cost about a millisecond per call in argument checking, and the
bootstrap calls them thousands of times.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from rliable import library as rly
from rliable import metrics

CONFIDENCE = 0.95
CVAR_ALPHA = 0.25
AGGREGATES = ("mean", "median", "iqm")


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (which rliable's bootstrap uses) and restore it afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def mean(scores: np.ndarray) -> float:
    return float(metrics.aggregate_mean(scores))


def median(scores: np.ndarray) -> float:
    """Median of all scores pooled over runs and tasks."""
    return float(np.median(scores))


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all scores pooled over runs and tasks (Agarwal et al. 2021)."""
    values = np.sort(np.asarray(scores, dtype=np.float64), axis=None)
    cut = int(0.25 * values.size)
    return float(values[cut:values.size - cut].mean())


def iqr(scores: np.ndarray) -> float:
    """Interquartile range `P75 − P25` (Chan et al. 2020's dispersion across runs)."""
    low, high = np.percentile(scores, [25, 75])
    return float(high - low)


def cvar(scores: np.ndarray, alpha: float = CVAR_ALPHA) -> float:
    """Conditional value at risk (Chan et al. 2020's risk across runs): the mean of the worst α
    fraction of the scores, `(x₍₁₎ + … + x₍ₖ₎ + (αn − k) x₍ₖ₊₁₎) / (αn)` with `k = ⌊αn⌋` over the
    sorted scores (the empirical expected shortfall of Acerbi & Tasche 2002: part of the next run
    counts when αn is not whole). Unlike `mean{x ≤ VaRα}`, it stays a tail mean when scores tie,
    as success rates often do: for 0.5, 1, 1, 1, 1 it is 0.6, not the mean 0.9."""
    values = np.sort(np.asarray(scores, dtype=np.float64), axis=None)
    size = alpha * values.size
    k = int(size)
    partial = (size - k) * values[k] if k < values.size else 0.0
    return float((values[:k].sum() + partial) / size)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """P(X > Y): per task, the share of run pairs where X scores higher (ties count ½); averaged
    over tasks. `scores_x` is `(n × tasks)`, `scores_y` is `(m × tasks)`."""
    x, y = scores_x[:, None, :], scores_y[None, :, :]
    return float(((x > y) + 0.5 * (x == y)).mean(axis=(0, 1)).mean())


def _aggregates(scores: np.ndarray) -> np.ndarray:
    return np.array([mean(scores), median(scores), iqm(scores)])


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def aggregate_estimates(score_dict: Mapping[str, np.ndarray], reps: int,
                        seed: int = 0) -> dict[str, dict[str, Estimate]]:
    """Mean, median and IQM per backbone with 95 % stratified bootstrap CIs (one bootstrap for all
    three). `score_dict` maps a backbone to its `(runs × tasks)` scores."""
    with seeded(seed):
        points, intervals = rly.get_interval_estimates(dict(score_dict), _aggregates, reps=reps,
                                                       confidence_interval_size=CONFIDENCE)
    return {key: {name: Estimate(float(points[key][i]), float(intervals[key][0, i]), float(intervals[key][1, i]))
                  for i, name in enumerate(AGGREGATES)}
            for key in score_dict}


def improvement_probabilities(score_dict: Mapping[str, np.ndarray], reps: int,
                              seed: int = 0) -> dict[tuple[str, str], Estimate]:
    """P(X > Y) with bootstrap CIs for every ordered pair of backbones (each unordered pair is
    bootstrapped once; P(Y > X) = 1 − P(X > Y) since ties count one half)."""
    pairs = {f"{x},{y}": (x, y) for x, y in itertools.combinations(score_dict, 2)}
    if not pairs:
        return {}
    with seeded(seed):
        points, intervals = rly.get_interval_estimates(
            {key: (score_dict[x], score_dict[y]) for key, (x, y) in pairs.items()},
            probability_of_improvement, reps=reps, confidence_interval_size=CONFIDENCE)
    result = {}
    for key, (x, y) in pairs.items():
        low, high = np.ravel(intervals[key])
        value, low, high = float(points[key]), float(low), float(high)
        result[x, y] = Estimate(value, low, high)
        result[y, x] = Estimate(1.0 - value, 1.0 - high, 1.0 - low)
    return result


def curve_band(curves: np.ndarray, reps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean learning curve over runs with a pointwise 95 % bootstrap band; `curves` is `(runs × T)`."""
    with seeded(seed):
        points, intervals = rly.get_interval_estimates({"curve": curves[:, None, :]},
                                                       lambda s: s.mean(axis=(0, 1)), reps=reps,
                                                       confidence_interval_size=CONFIDENCE)
    return points["curve"], intervals["curve"][0], intervals["curve"][1]
