"""Reversible residual layers (RevNet, Gomez et al. 2017; Reformer, Kitaev et al. 2020, Sec. 3).

A reversible layer carries the stream as two halves and couples them with the two submodules of an
identity-map Transformer-XL block (`attention_branch` and
`feedforward_branch`, Parisotto et al. 2020):

    Y₁ = X₁ + F(X₂),  F(x) = ReLU(MHA(LN([SG(m); x])))   (the layer's memory m is a constant input)
    Y₂ = X₂ + G(Y₁),  G(x) = ReLU(f(LN(x)))

and its inputs follow from its outputs: `X₂ = Y₂ − G(Y₁)`, `X₁ = Y₁ − F(X₂)`. So a stack of them
need not keep any layer's activations for backward: `reversible_stack` keeps the stack's outputs
and the layers' constant inputs only, and its backward walks down the stack reconstructing each
layer's inputs from its outputs while recomputing each branch once with gradient (Gomez et al. 2017,
Alg. 1). Recomputation needs the forward's random numbers, so the branches must be deterministic
(no dropout). `run_layers` is the same computation with plain autograd, which keeps everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from policies.attention.layer import KeysValues
from policies.backbones.transformer_xl import Residual, TransformerXLBlock

LayerContext = tuple[Tensor, Tensor, Tensor, Tensor | None]
"""what a layer's attention takes beside its input: memory keys, memory values, mask, position terms"""


def _undo_residual(branch: Callable[..., Tensor], y: Tensor, x_in: Tensor, extra: Sequence[Tensor | None],
                   grad_y: Tensor | None, wrt: Sequence[Tensor]) -> tuple[Tensor, tuple[Tensor | None, ...]]:
    """`x = y − branch(x_in, *extra)`, the stream before the residual `y = x + branch(x_in, *extra)`.

    With `grad_y`, the branch is recomputed with gradient and the gradients of `⟨grad_y, branch⟩`
    with respect to `x_in` and then to each tensor of `wrt` are returned too (`None` where unused).
    """
    with torch.set_grad_enabled(grad_y is not None):
        x_in = x_in.detach().requires_grad_(grad_y is not None)
        out = branch(x_in, *extra)
    grads = () if grad_y is None else torch.autograd.grad(out, (x_in, *wrt), grad_y, allow_unused=True)
    return y - out.detach(), grads


def _needs_grad(t: Tensor | None) -> bool:
    return t is not None and t.requires_grad


class ReversibleLayer(nn.Module):
    """`Y₁ = X₁ + F(X₂)`, `Y₂ = X₂ + G(Y₁)` with the attention and feed-forward branches of `block`
    (RevNet's additive coupling, Gomez et al. 2017, Sec. 3; Reformer's reversible Transformer layer,
    Kitaev et al. 2020, Sec. 3, with TrXL-I's submodules). `X₂` is the attention's input, so it is
    what the layer's memory records.

    The coupling replaces the block's merges: the block must have the identity-map layout with residual
    connections. A GTrXL gate `g(x, y)` cannot be solved for the stream `x` by a subtraction, and the
    post-LN layout normalises after the merge, which loses the scale of the stream. Backward recomputes
    both branches, so they must not draw random numbers: the block's dropout must be 0.
    """

    def __init__(self, block: TransformerXLBlock) -> None:
        super().__init__()
        if not block.identity_map or not isinstance(block.attn_gate, Residual):
            raise ValueError("a reversible layer needs an identity-map block with residual connections: a GTrXL "
                             "gate or post-LN's LayerNorm after the merge cannot be inverted by subtraction")
        dropouts = [m.p for m in block.modules() if isinstance(m, nn.Dropout)] + [getattr(block.attn, "dropout", 0.0)]
        if any(dropouts):
            raise ValueError("a reversible layer recomputes its branches in backward without the forward's random "
                             f"numbers: its block's dropout must be 0, got {max(dropouts)}")
        self.block = block

    def attention(self, x: Tensor, keys: Tensor, values: Tensor, mask: Tensor,
                  terms: Tensor | None) -> tuple[Tensor, KeysValues]:
        """`F(x)` and the keys and values of `[memory; segment]`."""
        return self.block.attention_branch(x, (keys, values), mask, terms)

    def _f(self, x: Tensor, *context: Tensor | None) -> Tensor:
        return self.attention(x, *context)[0]

    def forward(self, x1: Tensor, x2: Tensor, *context: Tensor | None) -> tuple[Tensor, Tensor, KeysValues]:
        f, window_kv = self.attention(x2, *context)
        y1 = x1 + f
        return y1, x2 + self.block.feedforward_branch(y1), window_kv

    def inverse(self, y1: Tensor, y2: Tensor, *context: Tensor | None) -> tuple[Tensor, Tensor]:
        """The inputs `(X₁, X₂)` that gave the outputs `(Y₁, Y₂)`."""
        x2, _ = _undo_residual(self.block.feedforward_branch, y2, y1, (), None, ())
        x1, _ = _undo_residual(self._f, y1, x2, context, None, ())
        return x1, x2

    def reverse(self, y1: Tensor, y2: Tensor, grad_y1: Tensor, grad_y2: Tensor, context: LayerContext
                ) -> tuple[Tensor, Tensor, Tensor, Tensor, list[Tensor | None], dict[int, Tensor]]:
        """Backward through the layer from its outputs alone (Gomez et al. 2017, Alg. 1).

        Returns the inputs `X₁, X₂`, their gradients, the gradients of the context tensors (`None`
        for those without gradient) and of the parameters, by `id`, that have one.
        """
        params = [p for p in self.parameters() if p.requires_grad]
        x2, (grad_g_in, *grads_g) = _undo_residual(self.block.feedforward_branch, y2, y1, (), grad_y2, params)
        grad_x1 = grad_y1 + grad_g_in  # Y₁ feeds Y₂ through G
        fresh = tuple(t.detach().requires_grad_() if _needs_grad(t) else t for t in context)
        leaves = [t for t in fresh if _needs_grad(t)]
        x1, (grad_f_in, *grads_f) = _undo_residual(self._f, y1, x2, fresh, grad_x1, (*leaves, *params))
        from_leaves = iter(grads_f[:len(leaves)])
        grads_context = [next(from_leaves) if _needs_grad(t) else None for t in fresh]
        grads_params = {}
        for p, from_g, from_f in zip(params, grads_g, grads_f[len(leaves):], strict=True):
            grads = [g for g in (from_g, from_f) if g is not None]
            if grads:
                grads_params[id(p)] = sum(grads[1:], grads[0])
        return x1, x2, grad_x1, grad_y2 + grad_f_in, grads_context, grads_params


def run_layers(layers: Sequence[ReversibleLayer], x1: Tensor, x2: Tensor, contexts: Sequence[LayerContext]
               ) -> tuple[Tensor, Tensor, Tensor, list[KeysValues]]:
    """The stack on `x1`, `x2` `[B, T, D]`: its outputs `Y₁, Y₂`, the records `[B, T, L, D]`
    (every layer's input `X₂`) and the keys and values of `[memory; segment]` per layer. Run under
    autograd, this keeps every layer's activations for backward (`reversible_stack` does not)."""
    records, window_kv = [], []
    for layer, context in zip(layers, contexts, strict=True):
        records.append(x2)
        x1, x2, kv = layer(x1, x2, *context)
        window_kv.append(kv)
    return x1, x2, torch.stack(records, dim=2), window_kv


class _ReversibleStack(torch.autograd.Function):
    """`run_layers` that saves only its outputs and the layers' contexts; the inputs of every
    layer are reconstructed during backward. Inputs: `x1, x2`, four context entries per layer, then
    the parameters (so their gradients go through autograd like any other)."""

    @staticmethod
    def forward(ctx, layers: Sequence[ReversibleLayer], x1: Tensor, x2: Tensor,  # type: ignore[override]
                *inputs: Tensor | None) -> tuple[Tensor, ...]:
        contexts = [tuple(inputs[4 * n:4 * n + 4]) for n in range(len(layers))]
        y1, y2, records, window_kv = run_layers(layers, x1, x2, contexts)  # type: ignore[arg-type]
        kv = [t for pair in window_kv for t in pair]
        ctx.layers = layers
        ctx.save_for_backward(y1, y2, *inputs[:4 * len(layers)])
        ctx.mark_non_differentiable(*kv)
        ctx.set_materialize_grads(False)
        return (y1, y2, records, *kv)

    @staticmethod
    def backward(ctx, grad_y1: Tensor | None, grad_y2: Tensor | None, grad_records: Tensor | None,
                 *_: Tensor | None) -> tuple[Tensor | None, ...]:
        y1, y2, *flat = ctx.saved_tensors
        layers = ctx.layers
        grad_y1 = torch.zeros_like(y1) if grad_y1 is None else grad_y1
        grad_y2 = torch.zeros_like(y2) if grad_y2 is None else grad_y2
        grads_context: list[Tensor | None] = []
        grads_params: dict[int, Tensor] = {}
        for n in reversed(range(len(layers))):
            y1, y2, grad_y1, grad_y2, grads, params = layers[n].reverse(y1, y2, grad_y1, grad_y2,
                                                                        tuple(flat[4 * n:4 * n + 4]))
            if grad_records is not None:
                grad_y2 = grad_y2 + grad_records[:, :, n]  # the record is the layer's input X₂
            grads_context = grads + grads_context
            for key, g in params.items():
                grads_params[key] = grads_params[key] + g if key in grads_params else g
        return None, grad_y1, grad_y2, *grads_context, *(grads_params.get(id(p)) for p in _parameters(layers))


def _parameters(layers: Sequence[ReversibleLayer]) -> list[Tensor]:
    """The distinct parameters of the layers that need a gradient, in a fixed order."""
    return list({id(p): p for layer in layers for p in layer.parameters() if p.requires_grad}.values())


def reversible_stack(layers: Sequence[ReversibleLayer], x1: Tensor, x2: Tensor, contexts: Sequence[LayerContext]
                     ) -> tuple[Tensor, Tensor, Tensor, list[KeysValues]]:
    """`run_layers` without keeping any layer's activations for backward.

    Backward recomputes every branch once from the outputs; the returned keys and values carry no gradient."""
    flat = [t for context in contexts for t in context]
    y1, y2, records, *kv = _ReversibleStack.apply(layers, x1, x2, *flat, *_parameters(layers))
    return y1, y2, records, list(zip(kv[0::2], kv[1::2], strict=True))
