"""Median stopping on running means: the pruner of `train_rl.py tune`.

A trial of a suite search reports the evaluations of its runs laid end to end, one task after another. Optuna's
`MedianPruner` compares a trial's *best* value so far with the median of the other trials' values *at the step*:
over a suite, a trial that solved an easy first task is then never stopped, and one at 0.996 where the others
stand at 1.00 is. Here both sides are running means, the mean of every evaluation reported up to the step (the
area under the learning curve so far), as the median stopping rule of Golovin et al. (2017) averages the others.
"""

from __future__ import annotations

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState


def running_mean(values: dict[int, float], step: int) -> float:
    """The mean of the values reported at steps up to `step` (NaN ones left out; NaN when none is left)."""
    kept = [value for at, value in values.items() if at <= step and not np.isnan(value)]
    return float(np.mean(kept)) if kept else float("nan")


class RunningMedianPruner(optuna.pruners.BasePruner):
    """Stop a trial at a step where its running mean is below the median of the completed trials' running means at
    the same step, once `n_startup_trials` trials are complete and past `n_warmup_steps` (the study maximises)."""

    def __init__(self, n_startup_trials: int = 5, n_warmup_steps: int = 0) -> None:
        self.n_startup_trials, self.n_warmup_steps = n_startup_trials, n_warmup_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps:
            return False
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not completed or len(completed) < self.n_startup_trials:
            return False
        others = [running_mean(t.intermediate_values, step) for t in completed if step in t.intermediate_values]
        others = [value for value in others if not np.isnan(value)]
        if not others:
            return False
        own = running_mean(trial.intermediate_values, step)
        return bool(np.isnan(own) or own < np.median(others))
