"""Language models on the memory backbones.

Transformer-XL's segment-level recurrence (Dai et al. 2019, Sec. 3.2) is the episode memory the
RL agents use: a long text is read in segments, each attending to the cached layer inputs of the
previous `M` tokens, and document boundaries play the part of episode starts. So the language
model is a token embedding, any registered backbone (`trxl`, `trxl-i`, `gtrxl`, `ut-act`,
or a baseline) and a softmax head — the attention, positions, gates, blocks and ACT are the very
modules the policies use.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._pytree import tree_map

from envs.rules import Range, shown
from policies.backbone import Aux
from policies.backbones.transformer_xl import TransformerXL, WindowTransformer
from policies.lm.depths import forward_with_depths, forward_with_exits
from policies.registry import make_backbone
from policies.window import State, Window, strip_cache


def scored_mean(nats: Tensor, scored: Tensor | None) -> Tensor:
    """The mean of the per-target losses `nats` `[T·B]` of a segment over the targets `scored[1:]`
    marks (`scored`: `[T + 1, B]`, aligned with the segment's tokens; `None`: every target); 0 when
    it marks none."""
    if scored is None:
        return nats.mean()
    weights = scored[1:].flatten().to(nats.dtype)
    return (nats * weights).sum() / weights.sum().clamp(min=1)


class MemoryLanguageModel(nn.Module):
    """`p(x_t | x_<t) = softmax(W h_t)`, `h_t = backbone(E x_≤t)` with the backbone's memory.

    Examples:
        >>> lm = MemoryLanguageModel(vocab_size=16, backbone="gtrxl", d_model=32, n_heads=2, memory_length=8)
        >>> tokens = torch.randint(16, (5, 3))                 # [T, B]
        >>> loss, state, _ = lm.loss(tokens, lm.initial_state(3))
        >>> lm.generate(tokens[-1], state, n_tokens=4).shape   # continues each row, O(M) per token
        torch.Size([4, 3])

    Every entry point checks its arguments first: a bad one raises `ValueError` (`envs.rules.ConfigError`) naming
    the argument, its value and what is valid. Tokens are integer tensors of ids in `[0, vocab_size)`.
    """

    def __init__(self, vocab_size: int, backbone: str = "trxl", d_embed: int = 64, future_targets: int = 0,
                 **backbone_options: Any) -> None:
        super().__init__()
        Range(1, integer=True).check("vocab_size", vocab_size)
        Range(1, integer=True).check("d_embed", d_embed)
        Range(0, integer=True).check("future_targets", future_targets)
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_embed)
        self.backbone = make_backbone(backbone, d_embed, **backbone_options)
        self.head = nn.Linear(self.backbone.output_dim, vocab_size)
        # Al-Rfou et al. (2019): extra heads, head k predicting the token k + 2 steps ahead
        self.future_heads = nn.ModuleList(nn.Linear(self.backbone.output_dim, vocab_size)
                                          for _ in range(future_targets))

    def initial_state(self, batch_size: int) -> State:
        """The memory of `batch_size` new streams (`ValueError` unless an integer >= 1)."""
        Range(1, integer=True).check("batch_size", batch_size)
        return self.backbone.initial_state(batch_size)

    def _checked_tokens(self, name: str, tokens: object, axes: int, min_steps: int = 1) -> Tensor:
        """`tokens` as long ids after `ValueError` unless an integer tensor of `axes` axes (`[T, B]` with at least
        `min_steps` steps, or `[B]`) of at least one stream, every id in `[0, vocab_size)`: one min/max read."""
        if (not isinstance(tokens, Tensor) or tokens.dtype == torch.bool or tokens.is_floating_point()
                or tokens.is_complex() or tokens.dim() != axes or not tokens.shape[-1] or tokens.shape[0] < min_steps):
            given = (f"a {tokens.dtype} tensor of shape {tuple(tokens.shape)}" if isinstance(tokens, Tensor)
                     else type(tokens).__name__)
            wanted = "[B] (one token per stream)" if axes == 1 else f"[T, B] of at least {min_steps} step(s)"
            raise ValueError(f"{name} is {given}; expected an integer tensor of token ids {wanted}, "
                             "of at least one stream")
        low, high = torch.stack(torch.aminmax(tokens)).tolist()
        ids = Range(0, self.vocab_size - 1, integer=True, note=f"a token id below vocab_size={self.vocab_size}")
        ids.check(name, low)
        ids.check(name, high)
        return tokens if tokens.dtype == torch.long else tokens.long()

    def _checked_state(self, state: object, n_streams: int) -> Window:
        """`state` after `ValueError` unless a `Window` of `n_streams` streams (the backbone checks the rest)."""
        if not isinstance(state, Window):
            raise ValueError(f"state={'None' if state is None else 'a ' + type(state).__name__}: expected a Window, "
                             f"initial_state({n_streams}) or the state the last call on these streams returned")
        if isinstance(state.valid, Tensor) and state.valid.shape[0] != n_streams:
            raise ValueError(f"state holds the memory of {state.valid.shape[0]} stream(s), the tokens {n_streams}; "
                             f"expected initial_state({n_streams}) or the state the last call on these streams "
                             "returned")
        return state

    @staticmethod
    def _check_flags(name: str, flags: object, tokens: Tensor) -> None:
        """`ValueError` unless `flags` is `None` or a tensor of one flag (a bool, or 0 or 1) per token."""
        if flags is not None and (not isinstance(flags, Tensor) or flags.shape != tokens.shape):
            given = f"of shape {tuple(flags.shape)}" if isinstance(flags, Tensor) else f"a {type(flags).__name__}"
            raise ValueError(f"{name} is {given}; expected None or a tensor of one flag per token, "
                             f"{tuple(tokens.shape)}")
        if flags is not None and flags.dtype != torch.bool and not ((flags == 0) | (flags == 1)).all():
            raise ValueError(f"{name} holds {shown(flags[(flags != 0) & (flags != 1)][0].item())}; expected flags: "
                             "a bool tensor, or one of 0 and 1")

    def _checked(self, tokens: object, state: object, min_steps: int, **flags: object) -> tuple[Tensor, Window]:
        """The tokens `[T, B]` and the state of a segment, after `ValueError` on any bad argument."""
        tokens = self._checked_tokens("tokens", tokens, 2, min_steps)
        for name, value in flags.items():
            self._check_flags(name, value, tokens)
        return tokens, self._checked_state(state, tokens.shape[1])

    def _backbone_inputs(self, tokens: Tensor, state: State, starts: Tensor | None) -> tuple[Tensor, State, Tensor]:
        starts = torch.zeros_like(tokens, dtype=torch.bool) if starts is None else starts
        return self.embedding(tokens), strip_cache(state), starts

    def hidden_states(self, tokens: Tensor, state: State, starts: Tensor | None = None) -> tuple[Tensor, State, Aux]:
        """The backbone's outputs `[T, B, D]` for a segment `tokens` `[T, B]` (`starts`: document starts)."""
        tokens, state = self._checked(tokens, state, 1, starts=starts)
        return self._hidden_states(tokens, state, starts)

    def _hidden_states(self, tokens: Tensor, state: State, starts: Tensor | None) -> tuple[Tensor, State, Aux]:
        return self.backbone.forward_sequence(*self._backbone_inputs(tokens, state, starts))

    def forward(self, tokens: Tensor, state: State, starts: Tensor | None = None) -> tuple[Tensor, State, Aux]:
        """Logits `[T, B, vocab]` for a segment `tokens` `[T, B]`; `starts` marks document starts."""
        hidden, state, aux = self.hidden_states(tokens, state, starts)
        return self.head(hidden), state, aux

    def loss(self, tokens: Tensor, state: State, starts: Tensor | None = None, future_weight: float = 0.0,
             intermediate_weight: float = 0.0, scored: Tensor | None = None) -> tuple[Tensor, State, Aux]:
        """Mean next-token cross-entropy of a segment (`tokens[t]` predicts `tokens[t + 1]`);
        the returned state (detached, as in Transformer-XL) continues with `tokens[-1]`. With
        `scored` `[T + 1, B]`, the mean is over the targets `tokens[t + 1]` it marks (`scored_mean`).

        The auxiliary losses of Al-Rfou et al. (2019, Sec. 2), each off at weight 0:

        - `future_weight`: the future heads' multiple-targets loss, the mean cross-entropy of head
          `k` predicting `tokens[t + k + 2]` wherever that token is in the segment;
        - `intermediate_weight`: the next-token loss of every intermediate layer's output (the input
          of the next depth, through the shared head), averaged over layers (windowed Transformers).
        """
        tokens, state = self._checked(tokens, state, 2, starts=starts, scored=scored)
        Range(0.0).check("future_weight", future_weight)
        Range(0.0).check("intermediate_weight", intermediate_weight)
        inputs, input_starts = tokens[:-1], None if starts is None else starts[:-1]
        if intermediate_weight > 0 and isinstance(self.backbone, WindowTransformer):
            hidden, depths, state, aux = forward_with_depths(self.backbone,
                                                             *self._backbone_inputs(inputs, state, input_starts))
        else:
            hidden, state, aux = self._hidden_states(inputs, state, input_starts)
            depths = None
        nats = F.cross_entropy(self.head(hidden).flatten(0, 1), tokens[1:].flatten(), reduction="none")
        loss = scored_mean(nats, scored)
        if depths is not None and depths.shape[2] > 1:
            intermediate = [F.cross_entropy(self.head(depths[:, :, n]).flatten(0, 1), tokens[1:].flatten())
                            for n in range(1, depths.shape[2])]
            loss = loss + intermediate_weight * torch.stack(intermediate).mean()
        if future_weight > 0 and self.future_heads:
            future = [F.cross_entropy(head(hidden[:-(k + 1)]).flatten(0, 1), tokens[k + 2:].flatten())
                      for k, head in enumerate(self.future_heads) if tokens.shape[0] > k + 2]
            if future:
                loss = loss + future_weight * torch.stack(future).mean()
        return loss, tree_map(lambda x: x.detach() if isinstance(x, Tensor) else x, state), aux

    def early_exit_loss(self, tokens: Tensor, state: State, threshold: float, starts: Tensor | None = None,
                        scored: Tensor | None = None) -> tuple[Tensor, Tensor, State]:
        """`loss` with depth-adaptive exits (Elbayad et al. 2020, confidence thresholding): a position
        stops after the first layer whose prediction through the shared head gives its most probable token
        at least `threshold`, and the top layer answers the rest
        (`policies.lm.depths.forward_with_exits`; train the exits with
        `intermediate_weight`). Returns the mean next-token loss and the mean number of layers run, both
        over the `scored` targets, and the state after the segment.

        Raises:
            ValueError: a backbone without a stack of distinct layers (only `trxl`, `trxl-i` and `gtrxl` exit).
        """
        if not isinstance(self.backbone, TransformerXL):
            raise ValueError(f"early exits need a stack of distinct Transformer layers (trxl, trxl-i, gtrxl); "
                             f"the backbone is {type(self.backbone).__name__}")

        tokens, state = self._checked(tokens, state, 2, starts=starts, scored=scored)
        Range(note="a confidence: above 1, no token exits early").check("threshold", threshold)

        def confident(_: int, h: Tensor) -> Tensor:
            return self.head(h).softmax(dim=-1).amax(dim=-1) >= threshold

        inputs, input_starts = tokens[:-1], None if starts is None else starts[:-1]
        hidden, state, aux = forward_with_exits(self.backbone, *self._backbone_inputs(inputs, state, input_starts),
                                                confident)
        nats = F.cross_entropy(self.head(hidden).flatten(0, 1), tokens[1:].flatten(), reduction="none")
        layers = aux["exit_depth"].flatten().to(nats.dtype)
        return scored_mean(nats, scored), scored_mean(layers, scored), state

    @torch.no_grad()
    def generate(self, last: Tensor, state: State, n_tokens: int, temperature: float = 0.0) -> Tensor:
        """Continue from `state` whose next input is `last` `[B]`: `n_tokens` tokens `[n, B]` (`n_tokens=0`: an empty
        `[0, B]`), greedy when `temperature` is 0, else sampled at that temperature (a finite number > 0). Each token
        is one cached backbone `step`; a bad argument raises `ValueError` before the first."""
        Range(0, integer=True, note="0: no token").check("n_tokens", n_tokens)
        Range(0.0, note="0: greedy").check("temperature", temperature)
        last = self._checked_tokens("last", last, 1)
        state = self._checked_state(state, last.shape[0])
        out = []
        no_start = torch.zeros_like(last, dtype=torch.bool)
        for _ in range(n_tokens):
            hidden, state = self.backbone.step(self.embedding(last), state, no_start)
            logits = self.head(hidden)
            # shifted to <= 0 and divided in float64, a tiny temperature gives 0 and -inf, never 0 / 0
            shifted = (logits - logits.amax(-1, keepdim=True)).double()
            last = (logits.argmax(-1) if temperature == 0 else
                    torch.distributions.Categorical(logits=shifted / temperature).sample())
            out.append(last)
        return torch.stack(out) if out else last.new_empty(0, last.shape[0])
