"""The language model over a memory backbone (`policies.lm.model`) and its retrieval: kNN-LM
(`policies.lm.knn`) and SPALM's gated retrieval (`policies.lm.spalm`)."""
