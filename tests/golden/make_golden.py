"""Record the golden outputs of every registered backbone and attention (run once, before a refactor).

For each case (a backbone name and its options: every entry of ``policies.BACKBONES``, and ``gtrxl`` with every
entry of ``policies.ATTENTIONS`` and a few option variants), a tiny fp32 model is built from a fixed seed and
driven on fixed inputs with episode starts in the middle: four warm-up steps fill its window, then a segment of
ten steps runs once through ``forward_sequence`` and once step by step. The state dict, the inputs and every
output go to ``tests/golden/golden.pt``, which ``tests/test_equivalence_golden.py`` reloads into today's
classes.

    OMP_NUM_THREADS=1 .venv/bin/python tests/golden/make_golden.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from policies import ATTENTIONS, BACKBONES, POSITIONS, make_backbone  # noqa: E402
from policies.window import strip_cache  # noqa: E402

GOLDEN = Path(__file__).with_name("golden.pt")
INPUT_DIM, N_ENVS, WARMUP, STEPS = 3, 2, 4, 10
SIZES = {"d_model": 8, "n_heads": 2, "n_layers": 2, "memory_length": 6, "max_steps": 2, "hidden_size": 8, "k": 3}
"""tiny sizes, each given to the backbones that take it"""
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gtrxl/episode_time=sinusoidal": ("gtrxl", {"episode_time": "sinusoidal"}),
    "gtrxl/episode_time=learned": ("gtrxl", {"episode_time": "learned"}),
    "gtrxl/episode_time=axial": ("gtrxl", {"episode_time": "axial"}),
    "gtrxl/absolute:learned": ("gtrxl", {"attention": "full", "position": "absolute",
                                         "position_options": {"encoding": "learned"}}),
    "gtrxl/absolute:axial": ("gtrxl", {"attention": "full", "position": "absolute",
                                       "position_options": {"encoding": "axial"}}),
    "gtrxl/compressive:conv": ("gtrxl", {"attention": "compressive",
                                         "attention_options": {"compression": "conv", "compression_rate": 2}}),
    "gtrxl/knn:top_k=2": ("gtrxl", {"attention": "knn", "attention_options": {"top_k": 2, "local_window": 2}}),
    "gtrxl/image-local:2d": ("gtrxl", {"attention": "image-local", "attention_options": {"width": 2}}),
    "ut-act/local": ("ut-act", {"attention": "local"}),
    "trxl-rev/alibi": ("trxl-rev", {"attention": "full", "position": "alibi"}),
    "linear/favor": ("linear", {"feature_map": "favor"}),
}


def cases() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every case: name → (backbone, options beyond the tiny sizes; the Transformer-XL family without an episode
    clock unless a case names one)."""
    found = {name: (name, {}) for name in BACKBONES}
    found.update({f"gtrxl/{attention}": ("gtrxl", {"attention": attention}) for attention in ATTENTIONS})
    found.update({f"gtrxl/{position}": ("gtrxl", {"attention": "full", "position": position})
                  for position in POSITIONS if position not in ATTENTIONS})
    found.update(VARIANTS)
    return {name: (backbone, {"episode_time": "none", **options} if backbone in ("trxl", "trxl-i", "gtrxl")
                   else options) for name, (backbone, options) in found.items()}


def build(backbone: str, options: dict[str, Any]) -> torch.nn.Module:
    """The tiny backbone of a case, its weights drawn from seed 0."""
    valid = BACKBONES[backbone].options()
    torch.manual_seed(0)
    sizes = {k: v for k, v in SIZES.items() if k in valid}
    return make_backbone(backbone, INPUT_DIM, **{**sizes, **options})


def inputs() -> dict[str, torch.Tensor]:
    """Fixed inputs: warm-up steps, a segment and its episode starts (env 0 restarts at step 6, env 1 at 3)."""
    generator = torch.Generator().manual_seed(1)
    starts = torch.zeros(STEPS, N_ENVS, dtype=torch.bool)
    starts[6, 0] = starts[3, 1] = True
    warm_starts = torch.zeros(WARMUP, N_ENVS, dtype=torch.bool)
    warm_starts[0] = True
    return {"warmup": torch.randn(WARMUP, N_ENVS, INPUT_DIM, generator=generator), "warmup_starts": warm_starts,
            "x": torch.randn(STEPS, N_ENVS, INPUT_DIM, generator=generator), "starts": starts}


def run(backbone: torch.nn.Module, data: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The outputs of a case: the segment at once (output, state after, aux) and step by step."""
    backbone.eval()
    with torch.no_grad():
        state = backbone.initial_state(N_ENVS)
        for x, start in zip(data["warmup"], data["warmup_starts"], strict=True):
            _, state = backbone.step(x, state, start)
        state = strip_cache(state)
        y, after, aux = backbone.forward_sequence(data["x"], state, data["starts"])
        steps, stepped = [], state
        for x, start in zip(data["x"], data["starts"], strict=True):
            out, stepped = backbone.step(x, stepped, start)
            steps.append(out)
    return {"sequence": y, "state_after": strip_cache(after).as_dict(), "aux": dict(aux), "steps": torch.stack(steps),
            "start_state": state.as_dict()}


def main() -> None:
    data = inputs()
    golden: dict[str, Any] = {"inputs": data, "cases": {}}
    for name, (backbone, options) in cases().items():
        model = build(backbone, options)
        golden["cases"][name] = {"backbone": backbone, "options": options,
                                 "state_dict": {k: v.clone() for k, v in model.state_dict().items()},
                                 **run(model, data)}
    torch.save(golden, GOLDEN)
    print(f"{len(golden['cases'])} cases, {GOLDEN.stat().st_size / 1024:.0f} KiB → {GOLDEN.relative_to(REPO)}")


if __name__ == "__main__":
    main()
