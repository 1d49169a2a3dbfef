"""The options `policies.policy.MemoryActorCriticPolicy` passes on to SB3's `ActorCriticPolicy` or reads
as sb3-contrib's `RecurrentActorCriticPolicy` does, each with its rule (`envs.rules`).

`ActorCriticOptions` types the policy's `**kwargs`, so `policies.options.checked` refuses a bad one
when the policy is built, and the command line reads the same rules for its `policy` section. A configuration
file names two of them where Python passes a class: `activation_fn` by a key of `ACTIVATIONS`,
`features_extractor_class` by an import path (the `Spelled` rule of each).
"""

from __future__ import annotations

from typing import Annotated, TypedDict

import torch
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from envs.rules import Count, LayerSizes, OneOf, OptionalMapping, Range, Spelled, Subclass, Switch, Text

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}
"""the activations a configuration file names (``policy.activation_fn: relu``), and the classes they name"""


class ActorCriticOptions(TypedDict, total=False):
    """SB3's `ActorCriticPolicy` options (`net_arch` ... `optimizer_kwargs`) and sb3-contrib's LSTM
    options (`lstm_hidden_size` ... `shared_lstm`, taken with `backbone="lstm"`,
    `policies.policy.from_sb3_contrib`), each annotated with its rule."""

    net_arch: Annotated[list[int] | dict[str, list[int]] | None, LayerSizes()]
    activation_fn: Annotated[type[nn.Module], Subclass(nn.Module, "torch.nn.Module", bare=True),
                             Spelled(OneOf(lambda: ACTIVATIONS))]
    ortho_init: Switch
    log_std_init: Annotated[float, Range(-40.0, 40.0, note="std = exp(value), whose square float32 holds")]
    full_std: Switch
    use_expln: Switch
    squash_output: Switch
    features_extractor_class: Annotated[
        type[BaseFeaturesExtractor] | None,
        Subclass(BaseFeaturesExtractor, "SB3's BaseFeaturesExtractor", optional=True),
        Spelled(Text(note="an import path, e.g. stable_baselines3.common.torch_layers.NatureCNN", optional=True))]
    features_extractor_kwargs: OptionalMapping
    share_features_extractor: Switch
    normalize_images: Switch
    optimizer_class: Annotated[type[torch.optim.Optimizer], Subclass(torch.optim.Optimizer, "torch.optim.Optimizer")]
    optimizer_kwargs: OptionalMapping
    lstm_hidden_size: Count
    n_lstm_layers: Count
    enable_critic_lstm: Switch
    shared_lstm: Switch
