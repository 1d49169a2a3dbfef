"""Studies over many runs: seed studies on a grid of tasks × backbones × seeds (:mod:`.study`) with their launchers
(:mod:`.launchers`), hyper-parameter search (:mod:`.tune`, :mod:`.tune_space`), and the reports, statistics and
figures made from run directories (:mod:`.runs`, :mod:`.report`, :mod:`.stats`, :mod:`.suite_scores`,
:mod:`.plotting`). Above the run core (:mod:`experiments.training`, :mod:`experiments.run_dir`); a report loads
neither torch nor the learners.
"""
