"""Learning-curve figures, shared by the study report (`experiments.studies.report`) and `train_rl.py plot`.

A figure shows groups of runs (by backbone, env, ...): each run's evaluation curve as a thin line
(dashed and ending in a cross for a run that diverged or failed), and per group the mean over its
finished runs with a pointwise 95 % bootstrap band (`experiments.studies.stats.curve_band`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from envs.atomic import save_figure
from experiments.studies import stats
from experiments.studies.runs import FINISHED, UNSUCCESSFUL, Run, counted


def group_colors(names: Sequence[str]) -> dict[str, Any]:
    """One tab10 colour per name, in order."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {name: palette(i % 10) for i, name in enumerate(names)}


def score_name(success: bool, stochastic: bool = False) -> str:
    """The y-axis label: success rate or mean return, of the stochastic policy where asked."""
    return ("success rate" if success else "mean return") + (" (stochastic policy)" if stochastic else "")


def plot_curves(groups: Mapping[str, Sequence[Run]], success: bool, title: str, path: Path, reps: int, seed: int,
                stochastic: bool = False) -> None:
    """Write `curves_figure` of these arguments to the new file `path`: `FileExistsError` when it exists, a file is
    never overwritten (`experiments.writable.write_new_file`)."""
    from experiments.writable import write_new_file

    figure = curves_figure(groups, success, title, reps, seed, stochastic)
    write_new_file(path, lambda tmp: save_figure(figure, tmp))


LABEL_WIDTH = 40
"""characters per line of a label in a figure (a variant's label names its settings: `wrapped`)"""


def wrapped(label: str, width: int = LABEL_WIDTH) -> str:
    """`label` in lines of at most `width` characters, broken at its spaces."""
    return "\n".join(textwrap.wrap(label, width)) or label


def shared_steps(runs: list[np.ndarray]) -> np.ndarray:
    """The evaluation steps of any of `runs` (each a run's increasing steps) within the span every run covers:
    the steps they share when they evaluated alike, else the union of their steps there."""
    first, last = max(steps[0] for steps in runs), min(steps[-1] for steps in runs)
    union = np.unique(np.concatenate(runs))
    return union[(union >= first) & (union <= last)]


def curves_figure(groups: Mapping[str, Sequence[Run]], success: bool, title: str, reps: int, seed: int,
                  stochastic: bool = False) -> Figure:
    """Each group's mean learning curve over its finished runs with a bootstrap band; every run as a thin line.

    `success`: plot success rates (else mean returns); `stochastic`: the sampling policy's evaluations.
    The mean is taken over the span of steps that every finished run of a group covers (`shared_steps`), each run
    read linearly between its evaluations where the runs evaluated at different steps.
    """
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    ax = figure.subplots()
    colors = group_colors(list(groups))
    for name, runs in groups.items():
        color = colors[name]
        finished = []
        for run in runs:
            steps, values = run.curve(success, stochastic)
            if not steps.size:
                continue
            failed = run.state() in UNSUCCESSFUL
            ax.plot(steps, values, color=color, lw=0.8, alpha=0.35, ls="--" if failed else "-")
            if failed:
                ax.plot(steps[-1:], values[-1:], "x", color=color, ms=6)
            elif run.state() == FINISHED:
                finished.append((steps, values))
        if not finished:
            continue
        common = shared_steps([steps for steps, _ in finished])
        if not common.size:
            continue
        curves = np.stack([np.interp(common, steps, values) for steps, values in finished])
        mean, low, high = stats.curve_band(curves, reps, seed)
        ax.plot(common, mean, color=color, lw=2, label=wrapped(f"{name} ({counted(len(finished), 'run')})"))
        ax.fill_between(common, low, high, color=color, alpha=0.2, lw=0)
    ax.set(xlabel="environment steps", ylabel=score_name(success, stochastic), title=title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    return figure
