"""The language-model workbench: train, evaluate and sample the language-model variants of the memory backbones
(``train_rl.py lm``; :mod:`lm.workbench`) on byte-level text and synthetic streams (:mod:`lm.data`). The model
itself is :mod:`policies.lm`; the run directories follow the run core's (:class:`experiments.run_dir.RunDirectory`).
"""
