"""The language model over a memory backbone (:mod:`policies.lm.model`) and its retrieval: kNN-LM
(:mod:`policies.lm.knn`) and SPALM's gated retrieval (:mod:`policies.lm.spalm`)."""
