"""The SB3 actor-critic policy with a memory backbone between features and heads.

observation → SB3 features extractor (flatten / NatureCNN / combined Dict extractor) →
memory backbone (episode memory) → SB3 `MlpExtractor` → action and value heads.
"""

from __future__ import annotations

import copy
import inspect
import traceback
from collections.abc import Mapping
from typing import Annotated, Any, NamedTuple, Unpack

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    MlpExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.common.utils import obs_as_tensor
from torch import Tensor
from torch.distributions import Categorical

from envs.rules import ConfigError, Flag, OptionalMapping, Switch, fitting_in_memory, one_line, short, shown
from policies.backbone import Aux, MemoryBackbone
from policies.options import checked
from policies.policy_options import ActorCriticOptions
from policies.popart import PopArtBeta, PopArtValueHead
from policies.registry import BACKBONES, BackboneName, CriticBackboneName, make_backbone
from policies.spaces import ExtractorMismatchError, ObservationError, check_spaces, env_actions, observation_problem
from policies.window import State, Window


class PolicyState(NamedTuple):
    """The memory of a policy, as sb3-contrib's `RNNStates(pi, vf)`: the actor's backbone state (the critic's too
    when they share the backbone) and the critic's own (`None` when shared)."""

    pi: State
    vf: State | None = None

    def backbones(self) -> dict[str, State]:
        """The states that are there, by backbone: `pi`, and `vf` when the critic has its own."""
        return {"pi": self.pi} if self.vf is None else {"pi": self.pi, "vf": self.vf}

MEMORY_OPTIONS = ("backbone", "backbone_kwargs", "share_backbone", "critic_backbone", "critic_backbone_kwargs")
"""the policy options that choose its memory, resolved together by :func:`memory_options`"""

SB3_CONTRIB_OPTIONS = {"lstm_hidden_size": "hidden_size", "n_lstm_layers": "n_layers",
                       "enable_critic_lstm": "share_backbone", "shared_lstm": "share_backbone"}
"""sb3-contrib's ``RecurrentActorCriticPolicy`` options that mean the same here with ``backbone="lstm"``, and the
engram option each sets (docs/recurrent-ppo.md)"""

MIXED_GYM_API = ("You have passed a tuple to the predict() function instead of a Numpy array or a Dict. "
                 "You are probably mixing Gym API with SB3 VecEnv API: `obs, info = env.reset()` (Gym) "
                 "vs `obs = vec_env.reset()` (SB3 VecEnv). "
                 "See related issue https://github.com/DLR-RM/stable-baselines3/issues/1694 "
                 "and documentation for more information: "
                 "https://stable-baselines3.readthedocs.io/en/master/guide/vec_envs.html#vecenv-api-vs-gym-api")
"""SB3's ``BasePolicy.predict`` message for the ``(obs, info)`` tuple of a gymnasium env's ``reset``"""

GSDE_OPTIONS = ("use_sde", "sde_sample_freq")
"""SB3's options of generalized state-dependent exploration (gSDE), which memory policies do not take"""
GSDE_REFUSED = ("gSDE (use_sde=True, sde_sample_freq) is not supported by memory policies: leave use_sde and "
                "sde_sample_freq unset; Box actions are sampled from a diagonal Gaussian whose state-independent "
                "log-std starts at log_std_init")


def _dtype_name(dtype: object) -> str:
    """A NumPy or torch dtype by its plain name (`float32`, `bool`, `int64`)."""
    return str(dtype).removeprefix("torch.")


def _per_env(shape: tuple[int, ...]) -> str:
    """A state entry's shape with its env axis named: `(n_envs, 64, 1, 64)`."""
    return "(" + ", ".join(["n_envs", *map(str, shape)]) + ")"


def default_features_extractor(observation_space: spaces.Space, normalize_images: bool
                               ) -> type[BaseFeaturesExtractor]:
    """The features extractor SB3's policies give `observation_space`: `CombinedExtractor` for a Dict,
    `NatureCNN` for an image as `is_image_space` decides it (an already normalised float image counts when
    `normalize_images` is False, as `NatureCNN` itself checks), else `FlattenExtractor` (Box vectors, and
    Discrete, MultiDiscrete and MultiBinary one-hot encoded by SB3's preprocessing)."""
    if isinstance(observation_space, spaces.Dict):
        return CombinedExtractor
    if is_image_space(observation_space, normalized_image=not normalize_images):
        return NatureCNN
    return FlattenExtractor


def memory_options(options: dict[str, Any], share_features_extractor: bool = True) -> dict[str, Any]:
    """Every option of `MEMORY_OPTIONS`, resolved from `options` (which must name `backbone`; it may hold
    sb3-contrib's LSTM options, `from_sb3_contrib`):

    - `backbone_kwargs`: every option of the backbone, defaults included, so what a model saves never depends on
      later defaults and two spellings of one policy compare equal;
    - `share_backbone`: unset, it follows `share_features_extractor`. A critic with a features extractor of its
      own (`share_features_extractor=False`) feeds its features to a backbone of its own, so it cannot share
      the actor's;
    - `critic_backbone` and `critic_backbone_kwargs`: the critic's own backbone when not shared, by default the
      actor's with the actor's options (`None` when shared).

    Raises:
        ValueError: options that contradict each other, naming them.
    """
    options = from_sb3_contrib(dict(options))
    backbone = options["backbone"]
    share = options.get("share_backbone")
    share = share_features_extractor if share is None else share
    if share and not share_features_extractor:
        raise ValueError("share_backbone=True with share_features_extractor=False: the critic's own features "
                         "extractor feeds a backbone of its own; set share_backbone=False or leave it unset")
    critic = options.get("critic_backbone")
    critic_kwargs = options.get("critic_backbone_kwargs")
    if share and (critic is not None or critic_kwargs is not None):
        raise ValueError(f"critic_backbone={critic!r} and critic_backbone_kwargs={critic_kwargs!r} choose the "
                         "critic's own backbone: they need share_backbone=False")
    backbone_kwargs = _resolve(backbone, options.get("backbone_kwargs"))
    if not share:
        critic = backbone if critic is None else critic
        critic_kwargs = _resolve(critic, backbone_kwargs if critic_kwargs is None and critic == backbone
                                 else critic_kwargs)
    return {"backbone": backbone, "backbone_kwargs": backbone_kwargs, "share_backbone": share,
            "critic_backbone": critic, "critic_backbone_kwargs": critic_kwargs}


def _resolve(backbone: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """Every option of `backbone` (unknown names and backbones are left for `make_backbone` to refuse)."""
    return BACKBONES[backbone].resolve(options or {}) if backbone in BACKBONES else dict(options or {})


def from_sb3_contrib(options: dict[str, Any]) -> dict[str, Any]:
    """`options` with sb3-contrib's LSTM options (`SB3_CONTRIB_OPTIONS`) in engram's terms, for
    `backbone="lstm"` only: `lstm_hidden_size` and `n_lstm_layers` become the backbone's `hidden_size` and
    `n_layers`; `shared_lstm=True` (one LSTM for actor and critic) becomes `share_backbone=True` (the critic's
    gradient reaches it too, where sb3-contrib detaches it), `enable_critic_lstm=True` (a critic LSTM of its own)
    `share_backbone=False`, and `enable_critic_lstm=False` without `shared_lstm` (a critic without memory) a
    critic backbone `mlp` of one layer as wide as the LSTM.

    Raises:
        ValueError: an sb3-contrib option with another backbone, `shared_lstm` with `enable_critic_lstm`, or an
            option that contradicts the engram option it sets.
    """
    contrib = {name: options.pop(name) for name in SB3_CONTRIB_OPTIONS if name in options}
    if not contrib:
        return options
    if options["backbone"] != "lstm":
        raise ValueError(f"{', '.join(contrib)}: sb3-contrib's LSTM options apply with backbone='lstm', got "
                         f"backbone={options['backbone']!r}; set its options in backbone_kwargs")
    backbone_kwargs = dict(options.get("backbone_kwargs") or {})
    for name in ("lstm_hidden_size", "n_lstm_layers"):
        if name in contrib:
            _set(backbone_kwargs, SB3_CONTRIB_OPTIONS[name], contrib[name], name)
    options["backbone_kwargs"] = backbone_kwargs
    shared = contrib.get("shared_lstm", False)
    critic_lstm = contrib.get("enable_critic_lstm", not shared)
    if shared and critic_lstm:
        raise ValueError("shared_lstm=True with enable_critic_lstm=True: choose one LSTM shared by actor and "
                         "critic (shared_lstm) or a critic LSTM of its own (enable_critic_lstm)")
    if "shared_lstm" in contrib or "enable_critic_lstm" in contrib:
        _set(options, "share_backbone", shared, "shared_lstm" if "shared_lstm" in contrib else "enable_critic_lstm")
        if not shared and not critic_lstm:
            width = BACKBONES["lstm"].resolve(backbone_kwargs)["hidden_size"]
            _set(options, "critic_backbone", "mlp", "enable_critic_lstm")
            _set(options, "critic_backbone_kwargs", {"hidden_size": width, "n_layers": 1}, "enable_critic_lstm")
    return options


def _set(options: dict[str, Any], name: str, value: Any, source: str) -> None:
    """Set `options[name]` from sb3-contrib's option `source`; a different value already there is refused."""
    current = options.get(name)
    if current is not None and current != value:
        raise ValueError(f"{source} sets {name}={value!r}, which contradicts {name}={current!r}")
    options[name] = value


class LazyCategorical(CategoricalDistribution):
    """SB3's categorical of a rollout step, its `torch.distributions` object built from the logits when first read."""

    def __init__(self, action_dim: int, logits: Tensor) -> None:
        self.built: Categorical | None = None
        super().__init__(action_dim)
        self.logits = logits

    @property
    def distribution(self) -> Categorical:  # type: ignore[override]
        if self.built is None:
            self.built = Categorical(logits=self.logits)
        return self.built

    @distribution.setter
    def distribution(self, value: Categorical | None) -> None:
        self.built = value


class PolicyStep(NamedTuple):
    """What one rollout step of the policy produces."""

    actions: Tensor
    values: Tensor
    log_prob: Tensor
    state: PolicyState
    distribution: Distribution  # SB3's may be reused: read it before the policy runs again


def draw_categorical(logits: Tensor, deterministic: bool) -> Tensor:
    """Actions `[B, 1]` from a categorical head's logits `l` `[B, n]` without `torch.distributions`: `argmax l`, or
    `a ~ softmax(l)` (the draws of its `Categorical` on the same logits)."""
    if deterministic:
        return logits.argmax(dim=-1, keepdim=True)
    return torch.multinomial(logits.softmax(dim=-1), 1, True)


def as_numpy(tensor: Tensor) -> np.ndarray:
    """A tensor at SB3's `predict` boundary as a NumPy array (sharing memory when it is on the CPU)."""
    return (tensor if tensor.device.type == "cpu" else tensor.cpu()).numpy()


def _one_per_env(episode_start: Any, n_envs: int) -> np.ndarray:
    """`predict`'s `episode_start` as a boolean array of one flag per env, or a `ValueError` naming the mismatch."""
    flags = np.asarray(episode_start)
    if flags.dtype.kind not in "biuf" or not np.isin(flags, (0, 1)).all():
        raise ValueError(f"episode_start={short(repr(episode_start))}: expected one flag per env, each True/False "
                         "(or 1/0): the dones of the last step")
    if flags.size != n_envs:
        raise ValueError(f"episode_start holds {flags.size} flag(s), the observation {n_envs} env(s): pass one "
                         "per env (the dones of the last step)")
    return flags.astype(bool, copy=False).reshape(n_envs)


def check_optimizer(optimizer_class: Any, optimizer_kwargs: Mapping[str, Any]) -> None:
    """Refuse (`ConfigError`) `optimizer_kwargs` that the optimizer (its class already checked) does not take or
    refuses, as its constructor does on one parameter (`eps=-1`), naming them."""
    if "lr" in optimizer_kwargs:
        raise ConfigError(f"optimizer_kwargs['lr']={shown(optimizer_kwargs['lr'])}: the learner's learning_rate sets "
                          "the step size; pass learning_rate (a number or a schedule) instead")
    try:
        optimizer_class([torch.zeros(1, requires_grad=True)], **{"lr": 1e-3, **optimizer_kwargs})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"optimizer_kwargs={short(repr(dict(optimizer_kwargs)))}: {optimizer_class.__name__} "
                          f"refuses them ({one_line(str(error))})") from None


def check_known(kwargs: Mapping[str, Any], backbone: Any) -> None:
    """Refuse a policy option that neither engram nor SB3's `ActorCriticPolicy` takes (`ConfigError` naming it
    and the valid ones) rather than SB3's `TypeError`; a backbone's option names the `backbone_kwargs` it
    belongs in."""
    unknown = [name for name in kwargs if name not in ActorCriticOptions.__annotations__]
    if not unknown:
        return
    own = [name for name, parameter in inspect.signature(MemoryActorCriticPolicy.__init__).parameters.items()
           if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    valid = [*own, *ActorCriticOptions.__annotations__]
    hint = ""
    if isinstance(backbone, str) and backbone in BACKBONES and unknown[0] in BACKBONES[backbone].options():
        hint = f" ({unknown[0]!r} is an option of backbone {backbone!r}: pass it in backbone_kwargs)"
    raise ConfigError(f"unknown policy option {unknown[0]!r}{hint}; valid options: {', '.join(valid)}")


class MemoryActorCriticPolicy(ActorCriticPolicy):
    """SB3's `ActorCriticPolicy` with a recurrent memory backbone (`policies.registry`).

    The backbone is built in `_build_mlp_extractor`, outside the modules that SB3's
    `ortho_init` re-initialises, so GTrXL gate biases and attention initialisations are kept,
    and it is part of `self.parameters()` when the optimizer is created. Actor and critic
    share the backbone by default (gradients of both losses reach it, as in CleanRL's
    PPO-TrXL); `share_backbone=False` gives the critic a backbone of its own.

    Observations go through SB3's preprocessing and a features extractor chosen as SB3's policies choose it
    (`default_features_extractor`) unless `features_extractor_class` names one.
    `share_features_extractor=False` gives the critic a features extractor of its own and, since the backbone
    consumes the features, a backbone of its own too (`share_backbone` then defaults to False).

    The state is a `PolicyState` (`vf` set with a separate critic backbone). `predict(obs, state,
    episode_start)` takes and returns it as NumPy arrays, `{"pi": {"memory": ..., "valid": ...}}`
    (`policies.window.Window.as_dict`), like sb3-contrib's recurrent policies.

    :param backbone: name in `policies.registry.BACKBONES`.
    :param backbone_kwargs: options of that backbone (`make_backbone`).
    :param share_backbone: one backbone for actor and critic; unset, as `share_features_extractor`.
    :param critic_backbone: the critic's own backbone (a name in `BACKBONES`) when not shared, by default the
        actor's; its output must be as wide as the actor's.
    :param critic_backbone_kwargs: its options, by default the actor's when it is the same backbone.
    :param popart: a PopArt value head (`policies.popart`) with statistics step size `popart_beta`.
    Other parameters are those of SB3's `ActorCriticPolicy`, except gSDE (`use_sde`), which is refused;
    sb3-contrib's `lstm_hidden_size`, `n_lstm_layers`, `enable_critic_lstm` and `shared_lstm` are taken
    with `backbone="lstm"` (`from_sb3_contrib`).
    """

    @checked()
    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, *,
                 backbone: BackboneName = "gtrxl", backbone_kwargs: OptionalMapping = None,
                 share_backbone: Annotated[bool | None, Flag(optional=True)] = None,
                 critic_backbone: CriticBackboneName = None, critic_backbone_kwargs: OptionalMapping = None,
                 popart: Switch = False, popart_beta: PopArtBeta = 1e-3,
                 **kwargs: Unpack[ActorCriticOptions]) -> None:
        if kwargs.pop("use_sde", False) or "sde_sample_freq" in kwargs:  # SB3's learners pass use_sde=False
            raise ValueError(GSDE_REFUSED)
        if kwargs.get("squash_output"):
            raise ConfigError("squash_output=True: SB3 squashes actions only with gSDE, which memory policies do not "
                              "take; leave it False (actions outside a Box are clipped to it)")
        check_spaces(observation_space, action_space)
        if "lstm_kwargs" in kwargs:
            raise ValueError(f"lstm_kwargs={kwargs['lstm_kwargs']!r}: engram's lstm backbone takes hidden_size and "
                             "n_layers in backbone_kwargs (or sb3-contrib's lstm_hidden_size and n_lstm_layers) and "
                             "no dropout, which would break rollout equals training")
        contrib = {name: kwargs.pop(name) for name in SB3_CONTRIB_OPTIONS if name in kwargs}
        check_known(kwargs, backbone)
        options = memory_options({"backbone": backbone, "backbone_kwargs": backbone_kwargs,
                                  "share_backbone": share_backbone, "critic_backbone": critic_backbone,
                                  "critic_backbone_kwargs": critic_backbone_kwargs, **contrib},
                                 kwargs.get("share_features_extractor", True))
        if kwargs.get("features_extractor_class") is None:
            kwargs["features_extractor_class"] = default_features_extractor(observation_space,
                                                                            kwargs.get("normalize_images", True))
        adam = kwargs.get("optimizer_class", torch.optim.Adam) is torch.optim.Adam
        if adam and kwargs.get("optimizer_kwargs") is None:
            kwargs["optimizer_kwargs"] = {"eps": 1e-5, "fused": True}  # SB3's eps; one kernel for all parameters
        check_optimizer(kwargs.get("optimizer_class", torch.optim.Adam), kwargs.get("optimizer_kwargs") or {})
        self.backbone_name, self.backbone_kwargs = options["backbone"], options["backbone_kwargs"]
        self.share_backbone = options["share_backbone"]
        self.critic_backbone_name = options["critic_backbone"]
        self.critic_backbone_kwargs = options["critic_backbone_kwargs"]
        self.popart, self.popart_beta = popart, popart_beta
        with fitting_in_memory("policy_kwargs: the policy's parameters",
                               "choose smaller net_arch or backbone_kwargs sizes"):
            super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    @classmethod
    def resolve_kwargs(cls, policy_kwargs: dict[str, Any]) -> dict[str, Any]:
        """`policy_kwargs` of this class as a model saves them: the memory options resolved
        (`memory_options`) over this class's defaults, so two spellings of one policy compare equal."""
        kwargs = dict(policy_kwargs)
        chosen = {}
        for klass in reversed(cls.__mro__):  # a subclass's defaults over its bases'
            if "__init__" in vars(klass):
                parameters = inspect.signature(klass.__init__).parameters
                chosen.update((name, parameters[name].default) for name in MEMORY_OPTIONS if name in parameters)
        chosen.update((name, kwargs.pop(name)) for name in (*MEMORY_OPTIONS, *SB3_CONTRIB_OPTIONS) if name in kwargs)
        return {**kwargs, **memory_options(chosen, kwargs.get("share_features_extractor", True))}

    def make_features_extractor(self) -> BaseFeaturesExtractor:
        """SB3's, with an extractor that fails on the observation space (in its own source) refused by name.

        Raises:
            ExtractorMismatchError: naming the observation space and the extractor.
        """
        extractor = self.features_extractor_class
        try:
            inspect.signature(extractor).bind(self.observation_space, **self.features_extractor_kwargs)
        except TypeError as error:
            raise ConfigError(f"features_extractor_kwargs={self.features_extractor_kwargs!r}: {extractor.__name__} "
                             f"does not take them ({error})") from None
        try:
            return super().make_features_extractor()
        except Exception as error:
            frames = traceback.extract_tb(error.__traceback__)
            if not any(frame.filename == inspect.getsourcefile(extractor) for frame in frames):
                raise
            seen = " (an image as the policy sees it, channels first)" if is_image_space(
                self.observation_space, check_channels=True, normalized_image=not self.normalize_images) else ""
            raise ExtractorMismatchError(f"its observation space {short(str(self.observation_space))}{seen} does not "
                                         f"fit the features extractor {extractor.__name__} ({one_line(error)}); choose "
                                         "another features_extractor_class") from None

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        if self.popart:  # wraps the same nn.Linear, so the optimizer already holds its parameters
            self.value_net = PopArtValueHead(self.value_net, beta=self.popart_beta)

    def _build_mlp_extractor(self) -> None:
        self.backbone = make_backbone(self.backbone_name, int(self.features_dim), **self.backbone_kwargs)
        self.critic_backbone = (None if self.share_backbone else make_backbone(
            self.critic_backbone_name, int(self.features_dim), **self.critic_backbone_kwargs))
        if self.critic_backbone is not None and self.critic_backbone.output_dim != self.backbone.output_dim:
            raise ValueError(f"critic_backbone {self.critic_backbone_name!r} outputs {self.critic_backbone.output_dim} "
                             f"features, the actor's backbone {self.backbone_name!r} {self.backbone.output_dim}: the "
                             "heads take one width; set the critic's width in critic_backbone_kwargs")
        self.mlp_extractor = MlpExtractor(self.backbone.output_dim, net_arch=self.net_arch,
                                          activation_fn=self.activation_fn, device=self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(backbone=self.backbone_name, backbone_kwargs=self.backbone_kwargs,
                    share_backbone=self.share_backbone, critic_backbone=self.critic_backbone_name,
                    critic_backbone_kwargs=self.critic_backbone_kwargs, popart=self.popart,
                    popart_beta=self.popart_beta)
        return data

    # -- memory --------------------------------------------------------------------------
    def _backbones(self) -> dict[str, MemoryBackbone]:
        return {"pi": self.backbone} if self.critic_backbone is None else {"pi": self.backbone,
                                                                           "vf": self.critic_backbone}

    def initial_state(self, n_envs: int) -> PolicyState:
        """The state of `n_envs` new episodes."""
        return PolicyState(self.backbone.initial_state(n_envs),
                           None if self.critic_backbone is None else self.critic_backbone.initial_state(n_envs))

    def records(self, state: PolicyState) -> dict[str, Tensor]:
        """The record each backbone pushed at the step that produced `state` (for the buffer)."""
        return {name: s.memory[:, -1] for name, s in state.backbones().items() if s.memory.shape[1] > 0}

    def _features(self, obs: PyTorchObs) -> tuple[Tensor, Tensor]:
        """The actor's and the critic's features of `obs` (one tensor twice with a shared features extractor)."""
        features = self.extract_features(obs)
        return (features, features) if self.share_features_extractor else features

    def invalidate_caches(self) -> None:
        """Forget what the backbones computed from the parameters; the learner calls it after each optimiser step."""
        for backbone in self._backbones().values():
            backbone.invalidate_caches()

    def load_from_vector(self, vector: np.ndarray) -> None:
        """SB3's `load_from_vector`, then `invalidate_caches`: the caches hold what the old parameters computed."""
        super().load_from_vector(vector)
        self.invalidate_caches()

    def _latents_step(self, obs: PyTorchObs, state: PolicyState, episode_starts: Tensor, critic: bool = True
                      ) -> tuple[Tensor, Tensor | None, PolicyState]:
        """The actor's latent, the critic's (`None` unless `critic`) and the next state of one step."""
        features = self.extract_features(obs)
        pi_features, vf_features = (features, features) if self.share_features_extractor else features
        latent_pi, pi_state = self.backbone.step(pi_features, state.pi, episode_starts)
        latent_vf, vf_state = latent_pi, None
        if self.critic_backbone is not None:
            latent_vf, vf_state = self.critic_backbone.step(vf_features, state.vf, episode_starts)
        new_state = PolicyState(pi_state, vf_state)
        return (self.mlp_extractor.forward_actor(latent_pi),
                self.mlp_extractor.forward_critic(latent_vf) if critic else None, new_state)

    # -- acting ----------------------------------------------------------------------------
    def forward(self, obs: PyTorchObs, state: PolicyState, episode_starts: Tensor,  # type: ignore[override]
                deterministic: bool = False) -> PolicyStep:
        """One rollout step: actions, values, log-probabilities, the next state and the distribution (the backbones
        called here, not through `_latents_step`, so the score is four frames below)."""
        features = self.extract_features(obs)
        pi_features, vf_features = (features, features) if self.share_features_extractor else features
        latent_pi, pi_state = self.backbone.step(pi_features, state.pi, episode_starts)
        latent_vf, vf_state = latent_pi, None
        if self.critic_backbone is not None:
            latent_vf, vf_state = self.critic_backbone.step(vf_features, state.vf, episode_starts)
        new_state = PolicyState(pi_state, vf_state)
        latent_pi, latent_vf = self.mlp_extractor.forward_actor(latent_pi), self.mlp_extractor.forward_critic(latent_vf)
        values = self.value_net(latent_vf)
        if not isinstance(self.action_dist, CategoricalDistribution):
            distribution = self._get_action_dist_from_latent(latent_pi)
            actions = distribution.get_actions(deterministic=deterministic)
            return PolicyStep(actions.reshape((-1, *self.action_space.shape)), values, distribution.log_prob(actions),
                              new_state, distribution)
        logits = self.action_net(latent_pi)
        log_pmf = logits - logits.logsumexp(dim=-1, keepdim=True)  # log π = l − logsumexp(l), [B, n]
        actions = draw_categorical(log_pmf, deterministic)  # [B, 1]
        return PolicyStep(actions.view(-1), values, log_pmf.gather(-1, actions).view(-1), new_state,
                          LazyCategorical(log_pmf.shape[-1], log_pmf))

    def distribution_params(self, distribution: Distribution) -> Tensor:
        """All parameters of an action distribution as one `[B, P]` tensor: logits (categorical,
        multi-categorical, Bernoulli) or mean and log-std (diagonal Gaussian)."""
        torch_dist = distribution.distribution
        if isinstance(distribution, DiagGaussianDistribution):
            return torch.cat([torch_dist.mean, torch_dist.stddev.log()], dim=-1)
        if isinstance(distribution, MultiCategoricalDistribution):
            return torch.cat([d.logits for d in torch_dist], dim=-1)
        if isinstance(distribution, CategoricalDistribution | BernoulliDistribution):
            return torch_dist.logits
        raise ValueError(f"unsupported action distribution {type(distribution).__name__}")

    def distribution_from_params(self, params: Tensor) -> Distribution:
        """The distribution that `distribution_params` flattened, as a new object (SB3's
        `proba_distribution` overwrites and returns `self.action_dist`)."""
        distribution = copy.copy(self.action_dist)
        if isinstance(distribution, DiagGaussianDistribution):
            mean, log_std = params.chunk(2, dim=-1)
            return distribution.proba_distribution(mean, log_std)
        return distribution.proba_distribution(action_logits=params)

    def get_distribution(self, obs: PyTorchObs, state: PolicyState | None,  # type: ignore[override]
                         episode_starts: Tensor) -> tuple[Distribution, PolicyState]:
        """The action distribution of `obs` as the next step of `state` (`None`: new episodes), and the next state."""
        latent_pi, _, new_state = self._latents_step(*self._one_step(obs, state, episode_starts), critic=False)
        return self._get_action_dist_from_latent(latent_pi), new_state

    def predict_values(self, obs: PyTorchObs, state: PolicyState | None,  # type: ignore[override]
                       episode_starts: Tensor) -> Tensor:
        """Values of `obs` as the next step of `state` (`None`: new episodes; the state itself is not advanced)."""
        return self.value_net(self._latents_step(*self._one_step(obs, state, episode_starts))[1])

    def _one_step(self, obs: Any, state: Any, episode_starts: Any) -> tuple[PyTorchObs, PolicyState, Tensor]:
        """The inputs of one step as tensors on the policy's device, with a `ValueError` naming the one whose number
        of envs is not the observation's (`state` as `predict` takes it)."""
        obs = obs_as_tensor(obs, self.device) if isinstance(obs, np.ndarray | dict) else obs
        n_envs = len(next(iter(obs.values())) if isinstance(obs, dict) else obs)
        state = self.state_of(state, n_envs)
        starts = torch.as_tensor(np.asarray(episode_starts) if isinstance(episode_starts, list) else episode_starts,
                                 device=self.device)
        if starts.numel() != n_envs:
            raise ValueError(f"episode_starts holds {starts.numel()} flag(s), the observation {n_envs} env(s)")
        return obs, state, starts.bool().reshape(n_envs)

    # -- training --------------------------------------------------------------------------
    def evaluate_segments(self, obs: PyTorchObs, actions: Tensor, state: PolicyState, episode_starts: Tensor
                          ) -> tuple[Tensor, Distribution, Aux]:
        """Recompute `N` stored segments of `T` steps with gradients.

        `obs` and `actions` are flattened time-major (`[T·N, ...]`), `episode_starts` is
        `[T, N]` and `state` holds the window entering each segment (as windows or as shared
        records, `policies.window.shared_windows`). Returns the values
        `[T·N]`, the action distribution and the backbones' auxiliary terms (critic
        backbone entries prefixed `vf/`).
        """
        T, N = episode_starts.shape
        pi_features, vf_features = (features.view(T, N, -1) for features in self._features(obs))
        latent_pi, _, aux = self.backbone.forward_sequence(pi_features, self.backbone.segment_state(state.pi),
                                                           episode_starts, final_state=False)
        latent_vf = latent_pi
        if self.critic_backbone is not None:
            latent_vf, _, aux_vf = self.critic_backbone.forward_sequence(
                vf_features, self.critic_backbone.segment_state(state.vf), episode_starts, final_state=False)
            aux = {**aux, **{f"vf/{k}": v for k, v in aux_vf.items()}}
        with torch.autocast(latent_pi.device.type, enabled=False):  # heads in float32 under a learner's autocast
            latent_pi = self.mlp_extractor.forward_actor(latent_pi.float().reshape(T * N, -1))
            latent_vf = self.mlp_extractor.forward_critic(latent_vf.float().reshape(T * N, -1))
            return (self.value_net(latent_vf).flatten(), self._get_action_dist_from_latent(latent_pi),
                    {name: value.float() for name, value in aux.items()})

    def evaluate_actions(self, obs: PyTorchObs, actions: Tensor,  # type: ignore[override]
                         state: PolicyState | Mapping[str, Mapping[str, np.ndarray | Tensor]],
                         episode_starts: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """sb3-contrib's `evaluate_actions`: values `[T·N, 1]`, log-probabilities and entropies `[T·N]` of
        time-major `actions`, recomputed with gradients through the memory (`evaluate_segments`); `state` as
        `initial_state` or `predict` gives it."""
        if state is None:
            raise ValueError("state=None: expected the state the segments start from (initial_state(n_envs) for new "
                             "episodes, or the state predict returned)")
        state = self.as_policy_state(state)
        n_envs = len(state.pi.valid)
        starts = torch.as_tensor(episode_starts, device=self.device)
        if starts.numel() % n_envs or len(actions) != starts.numel():
            raise ValueError(f"episode_starts holds {starts.numel()} flag(s) and actions {len(actions)}: expected one "
                             f"per step of each of the state's {n_envs} env(s), time-major")
        starts = starts.bool().reshape(-1, n_envs)
        values, distribution, _ = self.evaluate_segments(obs, actions, state, starts)
        return values.reshape(-1, 1), distribution.log_prob(actions), distribution.entropy()

    # -- SB3 inference API -----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters, read from the value head (SB3's walks every module, each call)."""
        value_net = self._modules.get("value_net")  # a Linear, or a head holding one (PopArt)
        return super().device if value_net is None else next(value_net.parameters()).device

    def predict(self, observation: np.ndarray | dict[str, np.ndarray],  # type: ignore[override]
                state: dict[str, dict[str, np.ndarray]] | None = None, episode_start: np.ndarray | None = None,
                deterministic: bool = False) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
        """Actions for `observation` and the next memory state, as in sb3-contrib.

        `state=None` starts new episodes; `episode_start[i]` clears env `i`'s memory first.
        """
        Flag().check("deterministic", bool(deterministic) if isinstance(deterministic, np.bool_) else deterministic)
        if self.training:  # `train(False)` walks every module: 20 % of a step, so only when it changes
            self.set_training_mode(False)
        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], dict):
            raise ValueError(MIXED_GYM_API)
        if (problem := observation_problem(observation, self.observation_space)) is not None:
            raise ObservationError(f"observation {problem}")
        obs, vectorized = self.obs_to_tensor(observation)
        n_envs = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
        with torch.inference_mode():
            torch_state = self.state_of(state, n_envs, ": pass the state predict returned for these envs (or None "
                                                     "to start)")
            starts = self._as_tensor(np.zeros(n_envs, dtype=bool) if episode_start is None
                                     else _one_per_env(episode_start, n_envs))
            latent_pi, _, new_state = self._latents_step(obs, torch_state, starts, critic=False)
            if isinstance(self.action_dist, CategoricalDistribution):
                actions = as_numpy(draw_categorical(self.action_net(latent_pi), deterministic))
            else:
                actions = as_numpy(self._get_action_dist_from_latent(latent_pi).get_actions(deterministic))
        actions = env_actions(actions.reshape((-1, *self.action_space.shape)), self.action_space)
        if not vectorized:
            actions = actions.squeeze(axis=0)
        return actions, {name: s.as_dict(as_numpy) for name, s in new_state.backbones().items()}

    def state_of(self, state: Any, n_envs: int, advice: str = "") -> PolicyState:
        """`state` for `n_envs` envs as the library holds it (`None`: new episodes), or a `ValueError` naming a state
        of another number of envs (followed by `advice`)."""
        state = self.initial_state(n_envs) if state is None else self.as_policy_state(state)
        if len(state.pi.valid) != n_envs:
            raise ValueError(f"state holds the memory of {len(state.pi.valid)} env(s), the observation {n_envs}"
                             + advice)
        return state

    def as_policy_state(self, state: PolicyState | Mapping[str, Mapping[str, np.ndarray | Tensor]]) -> PolicyState:
        """The state as the library holds it, from `predict`'s dict of arrays (a `PolicyState` is returned as is)."""
        if isinstance(state, PolicyState):
            return state
        if not isinstance(state, Mapping) or not all(isinstance(entries, Mapping) for entries in state.values()):
            raise ValueError(f"state={short(repr(state))}: expected None (new episodes) or the state predict "
                             "returned: a dict of each backbone's dict of arrays")
        if (problem := self._state_problem(state)) is not None:
            raise ValueError(f"state{problem}; pass the state this policy's predict returned (or None to start)")
        return PolicyState(**{name: Window.from_dict(entries, self._as_tensor) for name, entries in state.items()})

    def _state_problem(self, state: Mapping[str, Mapping[str, Any]]) -> str | None:
        """Where `state` is not one this policy's `predict` returns (other backbones or entries, another shape per
        env or dtype, a NaN or an infinity), or `None`; the key/value caches are optional."""
        expected = self._state_spec()
        if set(state) != set(expected):
            return f" holds the backbones {sorted(state)}; this policy's are {sorted(expected)}"
        for name, entries in expected.items():
            given = state[name]
            if missing := sorted(set(entries) - set(given)):
                return f"[{name!r}] lacks {', '.join(map(repr, missing))}"
            for key, value in given.items():
                where = f"[{name!r}][{key!r}]"
                shape, dtype = tuple(getattr(value, "shape", ())[1:]), _dtype_name(getattr(value, "dtype", None))
                if key not in entries and not key.startswith("cache_"):
                    return f"{where} is not an entry of this policy's state ({', '.join(entries)})"
                if key in entries and (shape, dtype) != entries[key]:
                    return (f"{where} has shape {_per_env(shape)} and dtype {dtype}; this policy's is "
                            f"{_per_env(entries[key][0])}, {entries[key][1]}")
                if dtype.startswith("float") and not (torch.isfinite(value).all() if isinstance(value, Tensor)
                                                      else np.isfinite(value).all()):
                    return f"{where} holds a NaN or an infinity"
        return None

    def _state_spec(self) -> dict[str, dict[str, tuple[tuple[int, ...], str]]]:
        """Each backbone's state entries (caches aside) as their shape per env and dtype, computed once."""
        if getattr(self, "_spec", None) is None:
            with torch.inference_mode():
                self._spec = {name: {key: (tuple(value.shape[1:]), _dtype_name(value.dtype))
                                     for key, value in s.as_dict().items() if not key.startswith("cache_")}
                              for name, s in self.initial_state(1).backbones().items()}
        return self._spec

    def _as_tensor(self, value: np.ndarray | Tensor) -> Tensor:
        """A state entry at SB3's `predict` boundary as a tensor on the policy's device (NumPy memory shared)."""
        if isinstance(value, np.ndarray) and self.device.type == "cpu":
            return torch.from_numpy(value)
        return torch.as_tensor(value, device=self.device)
