"""The language-model workbench: train, evaluate and sample the language-model variants of the memory backbones
(`train_rl.py lm`; `lm.workbench`) on byte-level text and synthetic streams (`lm.data`). The model
itself is `policies.lm`; the run directories follow the run core's (`experiments.run_dir.RunDirectory`).
"""
