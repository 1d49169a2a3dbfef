"""Studies over many runs: seed studies on a grid of tasks × backbones × seeds (`.study`) with their launchers
(`.launchers`), hyper-parameter search (`.tune`, `.tune_space`), and the reports, statistics and
figures made from run directories (`.runs`, `.report`, `.stats`, `.suite_scores`,
`.plotting`). Above the run core (`experiments.training`, `experiments.run_dir`); a report loads
neither torch nor the learners.
"""
