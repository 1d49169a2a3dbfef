"""GTrXL + PPO in one file: the reference a newcomer to engram reads first.

engram spreads this over ``policies/`` (the GTrXL backbone and the SB3 actor-critic on top of it)
and ``agents/`` (MemoryPPO's rollouts, segment buffer and loss). Here it is in plain PyTorch, top to
bottom: a T-Maze, the model, the memory window, the loss and the training loop. Given the same
weights it gives the library's logits, values and PPO loss (``tests/test_reference_example.py``).

    python examples/gtrxl_ppo_reference.py    # learns a T-Maze with a 10-step corridor, about a minute

Where each piece lives in engram: ``RelativeAttention`` is ``MultiHeadAttention.forward``
(``policies/attention/layer.py``); ``GRUGate`` and ``GTrXLBlock`` are ``GRUGate`` and ``TransformerXLBlock``;
``Agent`` is ``TransformerXL`` (built by ``policies.make_backbone("gtrxl", ...)``) inside
``MemoryActorCriticPolicy``; ``attention_mask``, ``push``
and ``window_before`` are the window operations of the memory contract; ``Rollout`` and ``segment_batch``
are ``MemoryRolloutBuffer``; ``ppo_loss`` is ``MemoryPPO.train``. The library adds, with the same results:
cached keys and values for rollout steps, each stored record projected once per minibatch, other gates,
attentions and backbones, dropout, a separate critic backbone, and bootstrapping of truncated episodes. Its
GTrXL can also add an encoding of each step's time in its episode to the input (``episode_time``, the
Decision Transformer's timestep embedding; off by default), which this file leaves out.

Papers: Transformer-XL (Dai et al. 2019), GTrXL (Parisotto et al. 2020), PPO (Schulman et al. 2017),
GAE (Schulman et al. 2016), T-Maze (Ni et al. 2023). Shapes: S rollout steps, E envs, T segment steps,
B a batch of envs or segments, M memory length, L layers, D model width, H heads, d = D / H.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class Args:
    """Every setting: MemoryPPO's defaults, with configs/demo.yaml's entropy bonus and GTrXL sizes (M = 16 here)."""

    seed: int = 0
    corridor: int = 10  # T-Maze corridor length: the cue is recalled this many steps after it is shown
    n_envs: int = 16
    n_steps: int = 64  # S: rollout steps per env
    total_timesteps: int = 60_000
    learning_rate: float = 1e-3  # decays linearly to 0 over the run
    gamma: float = 0.99
    gae_lambda: float = 0.95
    n_epochs: int = 4
    batch_size: int = 256  # steps per minibatch, i.e. batch_size / segment_length segments
    segment_length: int = 16  # T: consecutive steps of one env recomputed together in the update
    clip_range: float = 0.2
    clip_range_vf: float | None = None  # engram's default: the value loss is not clipped
    normalize_advantage: bool = True
    advantage_scale_decay: float = 0.999  # δ: Â is never divided by less than the scale the run has sustained
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    uniform_kl_coef: float = 0.01  # engram's KL(U ‖ π) barrier, on by default for finite action spaces
    max_grad_norm: float = 0.5
    d_model: int = 64
    n_layers: int = 1
    n_heads: int = 4
    memory_length: int = 16  # M: each layer attends to its own inputs at the last M steps of the episode
    gate_bias: float = 2.0  # b_g of the GRU gates: a fresh block starts close to the identity
    hidden: int = 64  # SB3's default actor and critic MLPs: two tanh layers of 64


# ---------------------------------------------------------------------------------------------- env
class TMaze(gym.Env):
    """Passive T-Maze (Ni et al. 2023): the goal side is shown in the first observation only; the agent
    walks right along a corridor of ``length`` cells and must then turn towards it (up or down).

    Observation ``[at_junction, s]``: ``s`` is the cue (+1 up, -1 down) at the first step, the agent's
    height at the junction and 0 elsewhere. Actions: 0 right, 1 up, 2 left, 3 down (moves into walls do
    nothing). ``length + 1`` steps; reward -1/length per step behind the optimal schedule, 1 at the end
    if the agent stands on the shown goal. Memoryless policies succeed half of the time.
    """

    MOVES = ((1, 0), (0, 1), (-1, 0), (0, -1))

    def __init__(self, length: int = 10) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(4)

    def _obs(self) -> np.ndarray:
        at_junction = self.x == self.length
        s = self.y if at_junction else (self.goal if self.t == 0 else 0)
        return np.array([at_junction, s], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x, self.y, self.t = 0, 0, 0
        self.goal = int(self.np_random.choice((-1, 1)))
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        x, y = self.x + self.MOVES[int(action)][0], self.y + self.MOVES[int(action)][1]
        if (y == 0 and 0 <= x <= self.length) or (x == self.length and abs(y) == 1):
            self.x, self.y = x, y
        self.t += 1
        done = self.t == self.length + 1
        reward = float(self.y == self.goal) if done else (-1.0 / self.length if self.x < self.t else 0.0)
        return self._obs(), reward, done, False, {"is_success": done and self.y == self.goal}


# -------------------------------------------------------------------------------------------- model
def sinusoids(distances: Tensor, dim: int) -> Tensor:
    """R (Vaswani et al. 2017, used by Transformer-XL at distances): ``[sin(p ω_i), cos(p ω_i)]``,
    ``ω_i = 10000^(-2i/dim)``, for distances ``p`` ``[K]`` → ``[K, dim]``."""
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=distances.dtype, device=distances.device)
                         * (-math.log(10000.0) / dim))
    angles = distances[:, None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def rel_shift(x: Tensor) -> Tensor:
    """The relative shift (Dai et al. 2019, App. B): ``x[..., i, k]`` holds query i's term for distance
    ``K-1-k``; the result holds at ``[..., i, j]`` the term for key j, at distance ``(K - T) + i - j``.
    Pad a zero column, read the ``[T, K+1]`` block as ``[K+1, T]``, drop the first row. Entries of
    future keys (``j > i + K - T``) are garbage that the causal mask hides."""
    *lead, T, K = x.shape
    padded = torch.cat([x.new_zeros(*lead, T, 1), x], dim=-1)  # [..., T, K+1]
    return padded.view(*lead, K + 1, T)[..., 1:, :].reshape(*lead, T, K)


class RelativeAttention(nn.Module):
    """Transformer-XL relative multi-head attention (Dai et al. 2019, Sec. 3.3), with its own u and v
    per layer. Projections are bias-free and Xavier-uniform; u, v ~ N(0, 0.02) as in the original code."""

    def __init__(self, D: int, H: int) -> None:
        super().__init__()
        self.H, self.d = H, D // H
        self.q = nn.Linear(D, D, bias=False)  # W_q
        self.kv = nn.Linear(D, 2 * D, bias=False)  # W_k,E and W_v, fused
        self.r = nn.Linear(D, D, bias=False)  # W_k,R: projects the sinusoids of distances
        self.out = nn.Linear(D, D, bias=False)
        for layer in (self.q, self.kv, self.out, self.r):
            nn.init.xavier_uniform_(layer.weight)
        self.u = nn.Parameter(torch.randn(H, self.d) * 0.02)  # global content bias
        self.v = nn.Parameter(torch.randn(H, self.d) * 0.02)  # global position bias

    def forward(self, h_tilde: Tensor, T: int, mask: Tensor) -> Tensor:
        """``h_tilde`` ``[B, K, D]`` is ``LN([SG(memory); segment])`` (K = M + T keys; the queries are its
        last T rows), ``mask`` ``[B, T, K]`` is True where query i may see key j. Returns ``[B, T, D]``."""
        B, K, D = h_tilde.shape
        H, d = self.H, self.d
        q = self.q(h_tilde[:, -T:]).view(B, T, H, d).transpose(1, 2)  # [B, H, T, d]
        k, v = (x.view(B, K, H, d).transpose(1, 2) for x in self.kv(h_tilde).chunk(2, dim=-1))  # [B, H, K, d]
        R = sinusoids(torch.arange(K - 1, -1, -1, dtype=h_tilde.dtype, device=h_tilde.device), D)  # [K, D]
        r = self.r(R).view(K, H, d).transpose(0, 1)  # W_kR R, distances K-1 ... 0: [H, K, d]
        # terms (a) + (c) and (b) + (d) of Transformer-XL's score, as in policies.attention.layer
        ac = torch.einsum("bhtd,bhkd->bhtk", q + self.u[:, None], k)  # (a) + (c): [B, H, T, K]
        bd = rel_shift(torch.einsum("bhtd,hkd->bhtk", q + self.v[:, None], r))  # (b) + (d): [B, H, T, K]
        scores = (ac + bd) / math.sqrt(d)
        scores = scores.masked_fill(~mask[:, None], float("-inf"))  # a query always sees itself: no empty row
        y = scores.softmax(dim=-1) @ v  # [B, H, T, d]
        return self.out(y.transpose(1, 2).reshape(B, T, H * d))


class GRUGate(nn.Module):
    """GTrXL's GRU-type gate (Parisotto et al. 2020, Sec. 3.2) of the stream x and a submodule output y:
    six bias-free Xavier-uniform D×D matrices and one bias, b_g, on z."""

    def __init__(self, D: int, gate_bias: float) -> None:
        super().__init__()
        self.W_r, self.W_z, self.W_g, self.U_r, self.U_z, self.U_g = (nn.Linear(D, D, bias=False) for _ in range(6))
        for layer in (self.W_r, self.W_z, self.W_g, self.U_r, self.U_z, self.U_g):
            nn.init.xavier_uniform_(layer.weight)
        self.b_g = nn.Parameter(torch.full((D,), gate_bias))

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        r = torch.sigmoid(self.W_r(y) + self.U_r(x))  # r = σ(W_r y + U_r x)
        z = torch.sigmoid(self.W_z(y) + self.U_z(x) - self.b_g)  # z = σ(W_z y + U_z x − b_g)
        h_hat = torch.tanh(self.W_g(y) + self.U_g(r * x))  # ĥ = tanh(W_g y + U_g (r ⊙ x))
        return (1 - z) * x + z * h_hat  # g = (1 − z) ⊙ x + z ⊙ ĥ


class GTrXLBlock(nn.Module):
    """One GTrXL layer: identity-map reordering (LayerNorm on submodule inputs only, ReLU on their
    outputs) with a GRU gate in place of each residual connection (Parisotto et al. 2020, Sec. 3)."""

    def __init__(self, D: int, H: int, gate_bias: float) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.attn_gate = nn.LayerNorm(D), RelativeAttention(D, H), GRUGate(D, gate_bias)
        self.ff_norm, self.ff_gate = nn.LayerNorm(D), GRUGate(D, gate_bias)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, D))  # f: no output activation

    def forward(self, E: Tensor, memory: Tensor, mask: Tensor) -> Tensor:
        """``E`` ``[B, T, D]`` this layer's input, ``memory`` ``[B, M, D]`` its inputs at the M steps before."""
        h_tilde = self.attn_norm(torch.cat([memory.detach(), E], dim=1))  # LN([SG(memory); E]): [B, M+T, D]
        Y = self.attn_gate(E, F.relu(self.attn(h_tilde, E.shape[1], mask)))  # Y = g(E, ReLU(RelMHA(h̃)))
        return self.ff_gate(Y, F.relu(self.ff(self.ff_norm(Y))))  # E' = g(Y, ReLU(f(LN(Y))))


def attention_mask(valid: Tensor, starts: Tensor, M: int) -> Tensor:
    """``[B, T, M+T]``: query i (at position M + i of ``[memory; segment]``) sees key j iff the key is valid,
    in i's episode and 0 to M steps back, exactly the window a step-by-step rollout gives it (so in a
    segment longer than M, later queries see fewer memory slots). ``valid`` ``[B, M]``: the memory slots of
    the episode running before the segment; ``starts`` ``[B, T]``: episode starts in the segment."""
    B, T = starts.shape
    episode = starts.long().cumsum(dim=1)  # [B, T]: 0 = the episode in memory, +1 at every start
    key_episode = torch.cat([episode.new_zeros(B, M), episode], dim=1)  # [B, M+T]
    key_valid = torch.cat([valid, valid.new_ones(B, T)], dim=1)  # [B, M+T]
    distance = torch.arange(M, M + T, device=starts.device)[:, None] - torch.arange(M + T, device=starts.device)
    return (key_valid[:, None] & (key_episode[:, None] == episode[:, :, None])
            & (distance >= 0) & (distance <= M))  # [B, T, M+T]


def head(D: int, hidden: int, n_out: int, out_gain: float) -> nn.Sequential:
    """SB3's default actor or critic on the backbone's output: two tanh layers, orthogonal init (gain √2,
    ``out_gain`` for the output layer: 0.01 for logits, 1 for the value), zero biases."""
    layers = [nn.Linear(D, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out)]
    for layer, gain in zip(layers[::2], (math.sqrt(2), math.sqrt(2), out_gain), strict=True):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """Observation → linear embedding → L GTrXL blocks over the episode memory → actor and critic heads.
    The embedding keeps PyTorch's default init: SB3's orthogonal init covers the heads only."""

    def __init__(self, obs_dim: int, n_actions: int, args: Args) -> None:
        super().__init__()
        D, self.M = args.d_model, args.memory_length
        self.embed = nn.Linear(obs_dim, D)
        self.blocks = nn.ModuleList(GTrXLBlock(D, args.n_heads, args.gate_bias) for _ in range(args.n_layers))
        self.actor = head(D, args.hidden, n_actions, 0.01)
        self.critic = head(D, args.hidden, 1, 1.0)

    def forward(self, obs: Tensor, memory: Tensor, valid: Tensor, starts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """A segment ``obs`` ``[T, B, obs_dim]`` with episode ``starts`` ``[T, B]`` after the window ``memory``
        ``[B, M, L, D]`` (layer l's inputs at the last M steps) of validity ``valid`` ``[B, M]``. Returns
        logits ``[T, B, A]``, values ``[T, B]`` and the records ``[T, B, L, D]`` (each layer's input at
        each step: what the steps leave in memory). A rollout step is the segment T = 1."""
        mask = attention_mask(valid, starts.T, self.M)
        h = self.embed(obs.transpose(0, 1))  # [B, T, D]
        records = []
        for n, block in enumerate(self.blocks):
            records.append(h.detach())  # Transformer-XL: each layer keeps its own input as memory
            h = block(h, memory[:, :, n], mask)
        h = h.transpose(0, 1)  # [T, B, D]
        return self.actor(h), self.critic(h).squeeze(-1), torch.stack(records, dim=2).transpose(0, 1)


def push(memory: Tensor, valid: Tensor, record: Tensor, start: Tensor) -> tuple[Tensor, Tensor]:
    """The window after a rollout step: an episode start clears it, the oldest slot leaves, the step's record
    ``[B, L, D]`` enters. Memory is stored as hidden inputs; keys and values are recomputed from them."""
    valid = valid & ~start[:, None]
    return (torch.cat([memory[:, 1:], record[:, None]], dim=1),
            torch.cat([valid[:, 1:], valid.new_ones(valid.shape[0], 1)], dim=1))


# ------------------------------------------------------------------------------------------ storage
@dataclass
class Rollout:
    """One rollout, time-major ``[S, E, ...]``, with the window carried into it (``[E, M, L, D]``,
    ``[E, M]``). Each step's record is stored once; windows are rebuilt from them (:func:`window_before`)."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    values: Tensor
    starts: Tensor
    records: Tensor  # [S, E, L, D]
    memory: Tensor
    valid: Tensor
    advantages: Tensor | None = None
    returns: Tensor | None = None


def window_before(rollout: Rollout, env: Tensor, t0: Tensor) -> tuple[Tensor, Tensor]:
    """The window entering step ``t0[n]`` of env ``env[n]`` ``[N]``: the M slots before it in
    ``[carried window; records]``, valid when stored valid and in the episode of step ``t0 - 1`` (the start
    at ``t0`` itself is the mask's job). Returns ``[N, M, L, D]`` and ``[N, M]``."""
    M = rollout.valid.shape[1]
    starts = rollout.starts.T  # [E, S]
    history = torch.cat([rollout.memory, rollout.records.transpose(0, 1)], dim=1)  # [E, M+S, L, D]
    history_valid = torch.cat([rollout.valid, torch.ones_like(starts)], dim=1)  # [E, M+S]
    episode = torch.cat([starts.new_zeros(starts.shape[0], M, dtype=torch.long), starts.long().cumsum(1)], dim=1)
    slots = t0[:, None] + torch.arange(M, device=t0.device)  # [N, M]: history index of each slot
    same_episode = episode[env[:, None], slots] == episode[env, M + t0 - 1][:, None]
    return history[env[:, None], slots], history_valid[env[:, None], slots] & same_episode


def segment_batch(rollout: Rollout, env: Tensor, t0: Tensor, T: int) -> dict[str, Tensor]:
    """N segments of T steps (env ``env[n]`` from step ``t0[n]``), time-major ``[T, N, ...]``."""
    t = t0[None] + torch.arange(T, device=t0.device)[:, None]  # [T, N]
    memory, valid = window_before(rollout, env, t0)
    fields = ("obs", "actions", "log_probs", "values", "starts", "advantages", "returns")
    return {"memory": memory, "valid": valid, **{name: getattr(rollout, name)[t, env] for name in fields}}


def gae(rewards: Tensor, values: Tensor, starts: Tensor, last_value: Tensor, last_done: Tensor,
        gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """GAE as SB3 computes it, ``Â_t = δ_t + γλ(1 − d_{t+1}) Â_{t+1}``, ``δ_t = r_t + γ(1 − d_{t+1}) V_{t+1} − V_t``,
    ``d_{t+1}`` = step t+1 starts an episode. Returns advantages and returns ``Â + V`` ``[S, E]``."""
    advantages, running = torch.zeros_like(rewards), torch.zeros_like(last_value)
    for t in reversed(range(len(rewards))):
        next_value, not_done = ((last_value, 1.0 - last_done.float()) if t == len(rewards) - 1
                                else (values[t + 1], 1.0 - starts[t + 1].float()))
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        advantages[t] = running = delta + gamma * lam * not_done * running
    return advantages, advantages + values


# ---------------------------------------------------------------------------------------------- PPO
def sustained_scale(previous: float, recent_stds: list[float], decay: float) -> float:
    """σ̄ after a rollout: the median advantage std of the last 5 rollouts, falling by at most ``decay`` per
    rollout (0: no floor). A solved policy's advantages are its value function's residue; standardising them
    without this floor gives the residue the scale of a learning signal (docs/notes/learning-after-solving.md)."""
    return 0.0 if decay == 0 else max(float(np.median(recent_stds)), decay * previous)


def ppo_loss(agent: Agent, batch: dict[str, Tensor], args: Args, scale: float = 0.0) -> tuple[Tensor, dict[str, float]]:
    """MemoryPPO's loss on N segments, recomputed from their stored windows with gradients inside them:
    ``L = −E[min(ρ Â, clip(ρ, 1 ± ε) Â)] + c_v E[(R − V)²] − c_e E[H(π)] + c_U E[KL(U ‖ π)]``,
    ``ρ = π(a)/π_old(a)``, ``KL(U ‖ π) = −log|A| − mean_a log π(a)``; ``Â = (A − mean A) / max(std A, σ̄)`` per
    minibatch, σ̄ = ``scale`` (:func:`sustained_scale`)."""
    logits, values, _ = agent(batch["obs"], batch["memory"], batch["valid"], batch["starts"])
    log_pi = logits.log_softmax(dim=-1)  # [T, N, A]
    log_prob = log_pi.gather(-1, batch["actions"][..., None]).squeeze(-1)
    advantages = batch["advantages"]
    if args.normalize_advantage and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std().clamp(min=scale) + 1e-8)
    ratio = torch.exp(log_prob - batch["log_probs"])
    policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - args.clip_range, 1 + args.clip_range))
    if args.clip_range_vf is not None:  # V_old + clip(V − V_old, ±ε_v)
        values = batch["values"] + (values - batch["values"]).clamp(-args.clip_range_vf, args.clip_range_vf)
    value_loss = (batch["returns"] - values).square().mean()
    entropy = -(log_pi.exp() * log_pi).sum(-1).mean()
    uniform_kl = (-math.log(log_pi.shape[-1]) - log_pi.mean(-1)).mean()
    loss = (policy_loss.mean() - args.ent_coef * entropy + args.vf_coef * value_loss
            + args.uniform_kl_coef * uniform_kl)
    return loss, {"policy": policy_loss.mean().item(), "value": value_loss.item(), "entropy": entropy.item()}


def step_envs(envs: list[TMaze], actions: Tensor) -> tuple[Tensor, Tensor, Tensor, list[bool]]:
    """Step every env; a finished env is reset at once and returns its next episode's first observation
    (SB3's auto-reset), so ``done`` marks the next step as an episode start. TMaze never truncates, so
    no value bootstrap is needed (engram adds γ V(final observation) to a truncated episode's reward)."""
    results = [env.step(action) for env, action in zip(envs, actions.tolist(), strict=True)]
    done = [terminated or truncated for _, _, terminated, truncated, _ in results]
    obs = [env.reset()[0] if d else r[0] for env, r, d in zip(envs, results, done, strict=True)]
    successes = [r[4]["is_success"] for r, d in zip(results, done, strict=True) if d]
    return torch.tensor(np.stack(obs)), torch.tensor([r[1] for r in results]), torch.tensor(done), successes


def main(args: Args) -> None:
    """Train: collect a rollout through the memory windows, compute GAE, update on segments; repeat."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    envs = [TMaze(args.corridor) for _ in range(args.n_envs)]
    obs = torch.tensor(np.stack([env.reset(seed=args.seed + i)[0] for i, env in enumerate(envs)]))
    agent = Agent(obs.shape[1], 4, args)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    E, S, M, T, L, D = args.n_envs, args.n_steps, args.memory_length, args.segment_length, args.n_layers, args.d_model
    memory, valid = torch.zeros(E, M, L, D), torch.zeros(E, M, dtype=torch.bool)  # the windows, kept across rollouts
    start = torch.ones(E, dtype=torch.bool)  # every env begins an episode
    n_updates, successes, began = args.total_timesteps // (S * E), [], time.time()
    stds, scale = [], 0.0  # advantage stds of the last rollouts, and σ̄
    for update in range(n_updates):
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * (1 - (update + 1) / n_updates)  # SB3: progress after the rollout
        rollout = Rollout(obs=torch.zeros(S, E, obs.shape[1]), actions=torch.zeros(S, E, dtype=torch.long),
                          log_probs=torch.zeros(S, E), values=torch.zeros(S, E),
                          starts=torch.zeros(S, E, dtype=torch.bool), records=torch.zeros(S, E, L, D),
                          memory=memory, valid=valid)  # the windows carried into this rollout
        rewards = torch.zeros(S, E)
        for t in range(S):  # rollout: one step of every env through its memory window
            with torch.no_grad():
                logits, value, record = agent(obs[None], memory, valid, start[None])
            dist = torch.distributions.Categorical(logits=logits[0])
            action = dist.sample()
            rollout.obs[t], rollout.actions[t], rollout.log_probs[t] = obs, action, dist.log_prob(action)
            rollout.values[t], rollout.starts[t], rollout.records[t] = value[0], start, record[0]
            memory, valid = push(memory, valid, record[0], start)
            obs, rewards[t], start, finished = step_envs(envs, action)
            successes += finished
        with torch.no_grad():
            last_value = agent(obs[None], memory, valid, start[None])[1][0]
        rollout.advantages, rollout.returns = gae(rewards, rollout.values, rollout.starts, last_value, start,
                                                  args.gamma, args.gae_lambda)
        stds = [*stds, rollout.advantages.std(correction=0).item()][-5:]
        scale = sustained_scale(scale, stds, args.advantage_scale_decay)
        seg_env, seg_t0 = np.repeat(np.arange(E), S // T), np.tile(np.arange(0, S, T), E)
        for _ in range(args.n_epochs):  # update: shuffled minibatches of segments, each from its stored window
            order = rng.permutation(len(seg_env))
            for first in range(0, len(order), args.batch_size // T):
                chosen = order[first:first + args.batch_size // T]
                batch = segment_batch(rollout, torch.as_tensor(seg_env[chosen]), torch.as_tensor(seg_t0[chosen]), T)
                loss, stats = ppo_loss(agent, batch, args, scale)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        success = np.mean(successes[-100:]) if successes else float("nan")
        print(f"update {update + 1:3d}/{n_updates}  steps {(update + 1) * S * E:6d}  success(last 100) {success:.2f}  "
              f"loss {loss.item():+.3f}  entropy {stats['entropy']:.2f}  {time.time() - began:.0f}s")


if __name__ == "__main__":
    main(Args())
