"""What makes a rollout step of a windowed Transformer cost O(M): a fingerprint of the parameters its caches were
computed with, and the position terms cached under it (the key/value caches themselves travel in the state,
:mod:`policies.window`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn


class StepCache:
    """The parameter fingerprint of ``modules`` and the position terms computed under it.

    :meth:`stamp` changes whenever one of the modules' parameters or buffers is updated in place (optimizer steps,
    ``load_state_dict``) or moved (``.to``). Covering whole modules means a new attention cannot forget to declare
    what its caches depend on. Call :meth:`forget` when the module's tensors are replaced (``_apply``,
    ``load_state_dict(assign=True)``): the tensors are walked once and then only read.
    """

    def __init__(self, modules: Callable[[], list[nn.Module]]) -> None:
        self.modules = modules
        self.tensors: list[Tensor] | None = None
        self.terms: tuple[int, list[Tensor | None]] | None = None

    def forget(self) -> None:
        """Walk the modules' tensors again at the next :meth:`stamp`."""
        self.tensors = None

    def stamp(self) -> int:
        """A fingerprint of every parameter and buffer of the modules (their storage and version counters)."""
        if self.tensors is None:
            self.tensors = [t for module in self.modules() for t in (*module.parameters(), *module.buffers())]
        return hash(tuple((t.data_ptr(), t._version) for t in self.tensors)) & (2**62 - 1)

    def position_terms(self, stamp: int, compute: Callable[[], list[Tensor | None]]) -> list[Tensor | None]:
        """The position terms for rollout steps, recomputed (without gradient) only when ``stamp`` changes."""
        if self.terms is None or self.terms[0] != stamp:
            with torch.no_grad():
                self.terms = (stamp, compute())
        return self.terms[1]
