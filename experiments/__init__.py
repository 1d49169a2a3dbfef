"""Experiment management: configuration, single runs, run directories, seed studies, launchers,
reports and their statistics. Above the learners (:mod:`agents`); below ``train_rl.py``.

The package imports nothing itself, so ``import experiments.report`` loads only what a report needs.
"""
