"""The tune pruner compares running means at a step: over a suite's runs laid end to end, a trial is judged by all
it has shown so far, neither saved by an easy first task nor stopped by a hair below a solved median."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from experiments.studies.pruning import RunningMedianPruner, running_mean

EARLIER = [{1: 0.2, 2: 1.0, 3: 1.0}, {1: 0.1, 2: 1.0, 3: 1.0}, {1: 0.3, 2: 0.9, 3: 1.0}]
"""completed trials: a hard first task, then a task every one of them solves"""


def study_of(curves: list[dict[int, float]]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for curve in curves:
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=curve[max(curve)], params={"x": 0.5},
                                     distributions={"x": FloatDistribution(0, 1)}, intermediate_values=curve))
    return study


def running(curve: dict[int, float]) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.RUNNING, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                        intermediate_values=curve)


@pytest.mark.parametrize(("curve", "pruned"), [
    ({1: 0.3, 2: 0.99, 3: 0.996}, False),  # a hair below the solved median, ahead on the mean: kept
    ({1: 0.0, 2: 0.5, 3: 0.5}, True),  # behind on both tasks
    ({1: 0.2, 2: 1.0}, False),  # level so far
])
def test_a_trial_is_stopped_where_its_running_mean_is_below_the_median(curve, pruned):
    assert RunningMedianPruner(n_startup_trials=3).prune(study_of(EARLIER), running(curve)) is pruned
    if curve == {1: 0.3, 2: 0.99, 3: 0.996}:  # Optuna's rule compares the best value so far with the value at step 3
        assert optuna.pruners.MedianPruner(n_startup_trials=3).prune(study_of(EARLIER), running(curve))


def test_an_easy_first_task_does_not_shield_a_trial_that_fails_the_next():
    earlier = [{1: 1.0, 2: 0.5, 3: 0.6}, {1: 1.0, 2: 0.6, 3: 0.7}, {1: 1.0, 2: 0.4, 3: 0.5}]
    curve = {1: 1.0, 2: -0.5, 3: -0.6}
    assert RunningMedianPruner(n_startup_trials=3).prune(study_of(earlier), running(curve))
    assert not optuna.pruners.MedianPruner(n_startup_trials=3).prune(study_of(earlier), running(curve))


def test_nothing_is_stopped_before_the_warm_up_the_startup_trials_or_a_comparable_step():
    behind = running({1: -1.0, 2: -1.0})
    assert not RunningMedianPruner(n_startup_trials=3, n_warmup_steps=3).prune(study_of(EARLIER), behind)
    assert not RunningMedianPruner(n_startup_trials=4).prune(study_of(EARLIER), behind)
    assert not RunningMedianPruner(n_startup_trials=3).prune(study_of(EARLIER), running({7: -1.0}))
    assert RunningMedianPruner(n_startup_trials=3).prune(study_of(EARLIER), behind)


def test_running_mean_leaves_out_later_steps_and_nan():
    assert running_mean({1: 1.0, 2: math.nan, 3: 0.0, 5: 9.0}, 3) == 0.5
    assert math.isnan(running_mean({4: 1.0}, 3))


def test_a_trial_of_several_runs_is_judged_after_its_first_run_one_run_after_a_third_of_it():
    from types import SimpleNamespace

    from experiments.config import RunConfig
    from experiments.studies.tune import make_pruner

    base = RunConfig(total_timesteps=90_000, eval_freq=10_000)
    single = make_pruner(SimpleNamespace(pruner="median", base=[base], seeds=[0], startup_trials=5))
    suite = make_pruner(SimpleNamespace(pruner="median", base=[base, base], seeds=[0, 1], startup_trials=5))
    assert (single.n_warmup_steps, suite.n_warmup_steps) == (30_000, 90_000)
