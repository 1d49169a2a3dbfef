"""The backbones: Transformer-XL (TrXL, TrXL-I, GTrXL), Universal Transformer with ACT, reversible and linear
Transformers, recurrent and MLP baselines, and the blocks and gates they are built from. They are named in
`policies.registry`."""
