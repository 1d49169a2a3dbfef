"""The run core: configuration and its validation, one training run, its run directory, evaluation and replay.
Above the learners (`agents`); below the command line (`experiments.cli`, `train_rl.py`). Studies over many runs,
tuning and reports are the package `experiments.studies`; the language-model workbench is `lm`.

The package imports nothing itself, so `import experiments.studies.report` loads only what a report needs.
"""
