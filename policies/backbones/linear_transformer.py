"""The `linear` backbone: gated Transformer blocks over causal linear attention (Katharopoulos
et al. 2020), a memory that reaches back to the episode's first step at O(1) cost per step."""

from __future__ import annotations

from torch import Tensor, nn

from envs.rules import Count, CountOrNone
from policies.backbone import MemoryBackbone, Sequence
from policies.backbones.linear_attention import CausalLinearAttention, FeatureMap
from policies.backbones.scan import through_layers
from policies.backbones.transformer_xl import HEADS_DIVIDE_D_MODEL, Gate, GateBias, TransformerXLBlock
from policies.options import checked
from policies.window import Window, as_bool


class LinearTransformer(MemoryBackbone):
    """A stack of `n_layers` identity-map blocks (GTrXL gates by default, Parisotto et al. 2020)
    whose attention is `CausalLinearAttention`.

    The state window holds one record, the carry after the previous step: per layer the sums
    `S` and `z` of every key and value of the episode so far, `[n_layers, H, m, d_head + 1]`
    (`m = d_head` features of `elu(x) + 1`, or `n_features` Performer features with `feature_map="favor"`).
    An episode start invalidates it, which feeds zero sums. `step` uses the recurrent form,
    `forward_sequence` the parallel form over the segment; both give the same outputs.

    Examples:
        >>> backbone = LinearTransformer(8, d_model=32, n_layers=2, n_heads=2)
        >>> state = backbone.initial_state(n_envs=4)
        >>> y, state = backbone.step(torch.randn(4, 8), state, torch.ones(4, dtype=torch.bool))
        >>> y.shape, state.memory.shape
        (torch.Size([4, 32]), torch.Size([4, 1, 2, 2, 16, 17]))
    """

    @checked(HEADS_DIVIDE_D_MODEL)
    def __init__(self, input_dim: int, *, d_model: Count = 128, n_layers: Count = 2, n_heads: Count = 4,
                 d_head: CountOrNone = None, d_inner: CountOrNone = None, gate: Gate = "gru",
                 gate_bias: GateBias = None, feature_map: FeatureMap = "elu", n_features: CountOrNone = None,
                 ff_chunks: Count = 1) -> None:
        super().__init__()
        if d_head is None:
            d_head = d_model // n_heads
        self.output_dim = d_model
        self.memory_length = 1
        self.embed = nn.Linear(input_dim, d_model)
        self.layers = nn.ModuleList(
            TransformerXLBlock(CausalLinearAttention(d_model, n_heads, d_head, feature_map=feature_map,
                                                     n_features=n_features),
                               d_model, d_inner or 4 * d_model, layout="identity-map", gate=gate, gate_bias=gate_bias,
                               ff_chunks=ff_chunks)
            for _ in range(n_layers))
        self.record_shape = (n_layers, n_heads, self.layers[0].attn.n_features, d_head + 1)

    def _run(self, h: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        """Every layer on `h` `[B, T, D]` from `carry` `[B, n_layers, H, d, d+1]`."""
        return through_layers(self.layers, h, carry, episode_starts)

    def _carry(self, state: Window, valid: Tensor) -> Tensor:
        """The carry of the window, zero where it is invalid."""
        return state.memory[:, 0] * valid[:, 0].to(state.memory.dtype).view(-1, 1, 1, 1, 1)

    def _read(self, x: Tensor, state: Window, valid: Tensor) -> tuple[Tensor, Tensor]:
        no_start = valid.new_zeros(valid.shape[0], 1)  # the window is already reset
        y, carry = self._run(self.embed(x).unsqueeze(1), self._carry(state, valid), no_start)
        return y[:, 0], carry

    def forward_sequence(self, x: Tensor, state: Window, episode_starts: Tensor, final_state: bool = True
                         ) -> Sequence:
        self.check_inputs(x, state, episode_starts, 3)
        valid = state.valid
        y, carry = self._run(self.embed(x.transpose(0, 1)), self._carry(state, valid),
                             as_bool(episode_starts).transpose(0, 1))
        after = Window(carry.detach().unsqueeze(1), valid.new_ones(valid.shape))
        return Sequence(y.transpose(0, 1), after, {})
