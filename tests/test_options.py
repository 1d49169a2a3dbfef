"""Options declare their rules in their constructors' annotations (:mod:`policies.options`): the Python API refuses
what the command line refuses, with the same words, and a new attention member is one module, whose rules the
command line, the checks and the docs read from it without any other file changing."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest
import torch
from stable_baselines3.common.utils import LinearSchedule

import agents
import train_rl
from agents import MemoryPPO
from envs import make_vec_env
from envs.rules import ConfigError, Range
from experiments.cli import listing
from experiments.config import build_config, section_rules
from experiments.validation import validate
from policies import ATTENTIONS, make_backbone
from policies.options import Relation, checked, is_checked, option_rules, relations

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--env", "TMaze-v0", "--env-kwargs", "length=3", "--n-envs", "4", "--threads", "1",
         "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.segment_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2",
         "gtrxl.memory_length=8", "n_eval_envs=2"]
"""a small valid run"""

MEMBER = '''"""A throwaway key pattern: the last ``window`` steps, every ``hop``-th of them."""

from __future__ import annotations

from typing import Annotated

from torch import Tensor

from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.options import Relation, checked
from envs.rules import Count, Range
from policies.window import key_distances

WHOLE_HOPS = Relation("window", ("window", "hop"), lambda o: o["window"] % o["hop"] == 0,
                      lambda o: f"a multiple of {o.show('hop')}")


@ATTENTIONS.register("scratch-hops", "the last W steps, every h-th (a test's throwaway member)")
class HopPattern(Pattern):
    """Keys ``d`` steps back with ``d <= W`` and ``d mod h = 0``."""

    @checked(WHOLE_HOPS)
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 window: Annotated[int, Range(2, integer=True)] = 4, hop: Count = 1) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.window, self.hop = window, hop

    def mask(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor:
        distances = key_distances(n_queries, n_keys, like.device)
        return (distances <= self.window) & (distances % self.hop == 0)
'''
"""the whole module of a new attention member, as its author would write it"""


def test_the_python_api_refuses_what_the_command_line_refuses():
    """The issue's cases: a discount out of range is refused, not trained with; ``d_model=0`` is refused by name,
    not by a ``ZeroDivisionError`` deep in the attention (mutation caught: ``@checked`` left off TransformerXL)."""
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    with pytest.raises(ConfigError, match=r"^gamma=2.0: expected a number in \[0, 1\]$"):
        MemoryPPO("MemoryPolicy", env, gamma=2.0)
    with pytest.raises(ConfigError, match="^d_model=0: expected an integer >= 1$"):
        make_backbone("gtrxl", 8, d_model=0)
    with pytest.raises(ConfigError, match="^d_model=0: expected an integer >= 1$"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone_kwargs": {"d_model": 0}})
    with pytest.raises(ConfigError, match=r"^net_arch=\[64, -1\]: expected a list of positive layer widths"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"net_arch": [64, -1]})
    with pytest.raises(ConfigError, match=r"^local_window=0: expected an integer >= 1 \(or null for the default\)$"):
        make_backbone("gtrxl", 8, attention="local", attention_options={"local_window": 0})
    assert issubclass(ConfigError, ValueError)


def test_the_python_api_names_devices_seeds_losses_widths_and_batches_it_cannot_take():
    """Held-out kinds of the same rule: a missing accelerator, a seed numpy refuses, a misspelt auxiliary loss, an
    input width below one and a state of other envs are each a `ValueError` naming the option, not a silent CPU run,
    an ignored key or a torch error deep inside; a string env is any spec the command line takes."""
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="^device='cuda': CUDA is not available on this machine"):
            MemoryPPO("MemoryPolicy", env, device="cuda")
    with pytest.raises(ValueError, match="^device='tpu': expected auto, cpu, cuda, cuda:N or mps$"):
        MemoryPPO("MemoryPolicy", env, device="tpu")
    with pytest.raises(ValueError, match=r"^seed=-1: expected an integer in \[0, 4294967295\]"):
        MemoryPPO("MemoryPolicy", env, seed=-1)
    with pytest.raises(ValueError, match="^aux_coefs: 'zzz' is not an auxiliary loss of backbone 'gtrxl'; its losses: "
                                         "none$"):
        MemoryPPO("MemoryPolicy", env, aux_coefs={"zzz": 1.0})
    for width in (0, 8.0, True):
        with pytest.raises(ValueError, match=f"^input_dim={width}: expected an integer >= 1$"):
            make_backbone("lstm", width)
    model = MemoryPPO("MemoryPolicy", "TMaze-v0", n_steps=16, batch_size=16)  # engram's id, not gym.make's
    assert model.observation_space.shape == (2,)
    _, state = model.predict(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="^state holds the memory of 2 env"):
        model.predict(np.zeros((3, 2), np.float32), state=state)


def test_the_python_api_names_a_misplaced_policy_option_and_a_negative_budget():
    """A backbone's option given beside `backbone` (not in `backbone_kwargs`) and an option nobody takes are each
    a `ValueError` naming the key and the valid ones, not SB3's `TypeError`; `learn` refuses a budget below zero
    (SB3 would return at once, having trained nothing), a fraction or one beyond the command line's limit, and takes
    SB3's float budgets."""
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    with pytest.raises(ConfigError, match=r"^unknown policy option 'n_heads' \('n_heads' is an option of backbone "
                                          r"'gtrxl': pass it in backbone_kwargs\); valid options: backbone, "):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"n_heads": 2})
    with pytest.raises(ConfigError, match=r"^unknown policy option 'hidden' ?; valid options: .*net_arch"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": "gru", "hidden": 8})
    model = MemoryPPO("MemoryPolicy", env, n_steps=4, batch_size=8, segment_length=4,
                      policy_kwargs={"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}})
    for budget in (-1, float("nan"), "100", 1.5, 10**30, 1e30):
        with pytest.raises(ConfigError, match=r"^total_timesteps=.*: expected an integer >= 0"):
            model.learn(budget)
    assert model.num_timesteps == 0
    model.learn(8.0)
    assert model.num_timesteps == 8
    with pytest.raises(ValueError, match=r"^episode_start holds 3 flag\(s\), the observation 2 env\(s\)"):
        model.predict(np.zeros((2, 2), np.float32), episode_start=np.zeros(3, bool))


@pytest.mark.parametrize(("learner", "args", "kwargs", "message"), [
    ("MemoryPPO", (5, "ENV"), {}, r"^policy=5: expected 'MemoryPolicy' or a MemoryActorCriticPolicy class"),
    ("MemoryPPO", ("MemoryPolicy", None), {}, r"^env=None: expected an env id, .*MemoryPPO.load"),
    ("MemoryPPO", ("MemoryPolicy", "ENV"), {"policy_kwargs": [1]}, r"^policy_kwargs=\[1\]: expected a mapping"),
    ("MemoryPPO", ("MemoryPolicy", "ENV"), {"verbose": 7}, r"^verbose=7: expected an integer in \[0, 2\]"),
    ("VMPO", ("MemoryPolicy", "ENV"), {"ent_coef": 0.1}, r"^unknown option 'ent_coef' of VMPO; valid options: "
                                                          r"learning_rate, n_steps, .*epsilon_eta"),
    ("VMPO", ("MemoryPolicy", "ENV"), {"gae_lambda": 0.9}, r"^unknown option 'gae_lambda' of VMPO"),
    ("MemoryPPO", ("MemoryPolicy", "ENV"), {"policy_kwargs": {"optimizer_kwargs": {"eps": -1}}},
     r"^optimizer_kwargs=\{'eps': -1\}: Adam refuses them \(Invalid epsilon value: -1\)"),
    ("MemoryPPO", ("MemoryPolicy", "ENV"), {"policy_kwargs": {"optimizer_kwargs": {"foo": 1}}},
     r"^optimizer_kwargs=\{'foo': 1\}: Adam refuses them \(.*unexpected keyword argument 'foo'\)"),
])
def test_a_learner_names_a_bad_policy_env_or_option(learner, args, kwargs, message):
    """Every argument a learner's constructor takes is checked by name, not left to SB3's or Python's error."""
    env = make_vec_env("CartPole-v1", 2, 0)
    args = tuple(env if arg == "ENV" else arg for arg in args)
    with pytest.raises(ConfigError, match=message):
        agents.ALGOS[learner.lower().removeprefix("memory")](*args, n_steps=16, batch_size=32, **kwargs)


@pytest.mark.parametrize(("custom_objects", "kwargs", "message"), [
    ({}, {"gamma": 2.0}, r"^gamma=2.0: expected a number in \[0, 1\]"),
    ({"gamma": 2.0}, {}, r"^gamma=2.0: expected a number in \[0, 1\]"),
    ({}, {"clip_range": -1.0}, r"^clip_range=-1.0: expected a number > 0"),
    ({}, {"n_epochs": 0}, r"^n_epochs=0: expected an integer >= 1"),
    ({}, {"n_steps": 10}, r"^n_steps=10: expected a multiple of the training segment, segment_length=16"),
    ({}, {"gama": 0.9}, r"^unknown option 'gama' of MemoryPPO.load; valid options: learning_rate, "),
    ({}, {"device": "tpu"}, r"^device='tpu': expected auto, cpu, cuda, cuda:N or mps"),
])
def test_load_checks_the_options_it_sets_as_the_constructor_does(custom_objects, kwargs, message, tmp_path):
    """`load`'s keyword arguments and `custom_objects` replace saved options: each is checked against its rule and
    against the saved options it relates to; `custom_objects` may still replace SB3's other objects."""
    env = make_vec_env("CartPole-v1", 2, 0)
    MemoryPPO("MemoryPolicy", env, n_steps=16, batch_size=32, policy_kwargs={"backbone": "mlp"}).save(tmp_path / "m")
    with pytest.raises(ConfigError, match=message):
        MemoryPPO.load(tmp_path / "m.zip", env=env, custom_objects=custom_objects, **kwargs)
    loaded = MemoryPPO.load(tmp_path / "m.zip", env=env, gamma=0.9,
                            custom_objects={"lr_schedule": lambda _: 0.0, "learning_rate": 0.0})
    assert loaded.gamma == 0.9
    with pytest.raises(FileNotFoundError, match=r"no saved model there \(nor with .zip added\): '.*missing.zip'"):
        MemoryPPO.load(tmp_path / "missing.zip")  # SB3 named 'missing.zip.zip'


@pytest.mark.parametrize(("call", "message"), [
    ({"observation": np.full((2, 4), np.nan, np.float32)}, "^observation holds a NaN or an infinity"),
    ({"observation": {"a": np.zeros((2, 4), np.float32)}}, "^observation is a dict; expected an array for the "
                                                          r"observation space Box of shape \(4,\)"),
    ({"observation": np.array([["a"] * 4] * 2)}, "^observation has dtype <U1; expected numbers"),
    ({"state": "hello"}, "^state='hello': expected None .* or the state predict returned"),
    ({"state": (1, 2)}, r"^state=\(1, 2\): expected None"),
    ({"episode_start": np.array([2, 3])}, r"^episode_start=array\(\[2, 3\]\): expected one flag per env"),
    ({"episode_start": "x"}, r"^episode_start='x': expected one flag per env"),
])
def test_predict_names_a_malformed_observation_state_or_episode_start(call, message):
    """What `predict` cannot use is a `ValueError` naming the argument, not torch's or numpy's error."""
    model = MemoryPPO("MemoryPolicy", make_vec_env("CartPole-v1", 2, 0), n_steps=8, batch_size=16, segment_length=8,
                      policy_kwargs={"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}})
    with pytest.raises(ValueError, match=message):
        model.predict(**{"observation": np.zeros((2, 4), np.float32), **call})
    actions, _ = model.predict(np.zeros((2, 4), np.float32), episode_start=np.array([True, False]))
    assert actions.shape == (2,)


@pytest.mark.parametrize(("args", "message"), [
    (("TMaze-v0", 0), "n_envs=0: expected an integer >= 1"),
    (("TMaze-v0", "2"), "n_envs='2': expected an integer >= 1"),
    (("TMaze-v0", 2, -1), "seed=-1: expected an integer >= 0"),
    (("CartPole-v1", 2, 0.5), "seed=0.5: expected an integer >= 0"),
])
def test_make_vec_env_names_a_bad_count_or_seed(args, message):
    """The env factory of the Python API names its key like every other rule (before: a `TypeError` comparing a
    string with 0, and numpy's unnamed "expected non-negative integer")."""
    with pytest.raises(ValueError, match=f"^{message}"):
        make_vec_env(*args)


def test_relations_live_in_the_component_and_name_its_options():
    with pytest.raises(ConfigError, match=r"^n_heads=3: expected a divisor of d_model=16 \(or set d_head\)$"):
        make_backbone("gtrxl", 8, d_model=16, n_heads=3)
    make_backbone("gtrxl", 8, d_model=16, n_heads=3, d_head=4)
    with pytest.raises(ConfigError, match="^n_steps=18: expected a multiple of the training segment, "
                                          "segment_length=4$"):
        MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", 2, 0, length=3), n_steps=18, segment_length=4)
    assert [relation.key for relation in relations(MemoryPPO)] == ["n_steps", "batch_size"]


def test_a_schedule_is_checked_where_it_can_be():
    """A linear schedule's ends are checked; any other schedule is the caller's own function (as SB3 takes it)."""
    rules = option_rules(MemoryPPO.__init__)
    rules["learning_rate"].check("learning_rate", lambda progress: 3e-4 * progress)
    rules["learning_rate"].check("learning_rate", LinearSchedule(1e-3, 0.0, 1.0))
    with pytest.raises(ConfigError, match=r"^learning_rate=lin_0.001_-1.0: expected a number in \[0, 3.40282e\+38\]"):
        rules["learning_rate"].check("learning_rate", LinearSchedule(1e-3, -1.0, 1.0))
    with pytest.raises(ConfigError, match=r"^gamma=lin_0.9_0.0: expected a number in \[0, 1\], not a schedule$"):
        rules["gamma"].check("gamma", LinearSchedule(0.9, 0.0, 1.0))


def test_a_wrong_call_keeps_pythons_own_message():
    class Thing:
        @checked(Relation("low", ("low", "high"), lambda o: o["low"] <= o["high"], lambda o: f"<= {o.show('high')}"))
        def __init__(self, low: Annotated[int, Range(0, integer=True)] = 0, high: int = 1) -> None:
            self.low, self.high = low, high

    with pytest.raises(TypeError, match="unexpected keyword argument 'middle'"):
        Thing(middle=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="^low=-1: expected an integer >= 0$"):
        Thing(low=-1)
    with pytest.raises(ConfigError, match="^low=3: expected <= high=1$"):
        Thing(low=3)
    assert Thing(low=1, high=2).high == 2 and is_checked(Thing.__init__)


def test_reading_run_settings_loads_no_torch():
    code = ("import sys; from experiments.config import build_config; build_config(overrides=['n_envs=4']); "
            "print(sorted({'torch', 'stable_baselines3', 'agents'} & {m.partition('.')[0] for m in sys.modules}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.fixture
def new_member(tmp_path):
    """:data:`MEMBER` saved as a module and imported (as the attention package imports each of its modules); the
    registry forgets it afterwards."""
    path = tmp_path / "scratch_hops.py"
    path.write_text(MEMBER)
    spec = importlib.util.spec_from_file_location("scratch_hops", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield ATTENTIONS["scratch-hops"].cls
    del ATTENTIONS["scratch-hops"]


def test_a_new_attention_member_is_one_module(new_member, tmp_path, capsys, monkeypatch):
    """The member's own module is all it takes: the Python API, the command line (its rule, its relation, a good
    run validated), ``list`` and the generated docs read its options and rules from it, and it passes the
    checks every member must (mutation caught: the validation reading rules from a table of its own)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="^window=1: expected an integer >= 2$"):
        make_backbone("gtrxl", 4, d_model=8, n_heads=2, attention="scratch-hops", attention_options={"window": 1})
    runs = ["--log-dir", str(tmp_path / "runs")]
    for options, message in [("{window: 1}", "gtrxl.attention_options.window=1: expected an integer >= 2"),
                             ("{window: 5, hop: 2}", "gtrxl.attention_options.window=5: expected a multiple of "
                                                     "gtrxl.attention_options.hop=2"),
                             ("{hop: 0}", "gtrxl.attention_options.hop=0: expected an integer >= 1")]:
        argv = [*SMALL, *runs, "-p", "gtrxl.attention=scratch-hops", f"gtrxl.attention_options={options}"]
        assert train_rl.main(argv) == 2
        assert message in capsys.readouterr().err
    validate(build_config(overrides=[*SMALL[-7:], "env_kwargs.length=3", "n_envs=4", "gtrxl.attention=scratch-hops",
                                     "gtrxl.attention_options={window: 4, hop: 2}", f"log_dir={tmp_path / 'runs'}"]))
    assert not (tmp_path / "runs").exists()
    assert listing.main(["attentions"]) == 0 and "scratch-hops" in capsys.readouterr().out
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    catalogue = hooks.attentions()
    assert "### `scratch-hops`" in catalogue and "| `window` | `4` | an integer >= 2 |" in catalogue
    assert "| `attention_options.hop` | attention " in hooks.option_rules()
    assert set(ATTENTIONS.options("scratch-hops")) == set(option_rules(new_member.__init__)) == {"window", "hop"}
    assert is_checked(new_member.__init__)


@pytest.mark.parametrize(("override", "read"), [
    ("ppo.n_steps=32.0", 32), ("gtrxl.d_head=8.0", 8), ("gtrxl.d_inner=3e1", 30), ("seed=1e3", 1000),
    ("gtrxl.d_head=null", None), ("policy.share_backbone=null", None), ("policy.features_extractor_class=null", None),
])
def test_an_option_reads_a_value_by_its_constructors_rule_whatever_its_default(override, read):
    """A whole number is the integer an integer option takes, and null the default an optional option takes,
    whether the option's default is a number or unset."""
    config = build_config(overrides=[override])
    key, _, _ = override.partition("=")
    head, _, option = key.partition(".")
    value = config.options.get(head, config.policy)[option] if option else config.seed
    assert value == read and type(value) is type(read)


def test_a_schedule_is_read_wherever_the_rule_takes_one():
    config = build_config(overrides=["ppo.clip_range_vf=lin_0.5"])
    assert isinstance(config.options["ppo"]["clip_range_vf"], LinearSchedule)
    validate(config)


@pytest.mark.parametrize(("override", "keyword"), [
    ("ppo.n_steps=32.5", {"n_steps": 32.5}), ("gtrxl.d_head='x'", None), ("ppo.gae_lambda=x", {"gae_lambda": "x"}),
])
def test_a_value_no_rule_reads_is_refused_with_the_rules_own_words(override, keyword):
    with pytest.raises(ConfigError) as refused:
        build_config(overrides=[override])
    section, _, option = override.partition("=")[0].partition(".")
    rule = section_rules(section)[option]
    assert f": expected {rule.describe()}" in str(refused.value)
    if keyword is not None:
        with pytest.raises(ValueError, match=f": expected {re.escape(rule.describe())}"):
            MemoryPPO("MemoryPolicy", make_vec_env("TMaze-v0", 2, 0, length=3), **keyword)


@pytest.mark.parametrize("flag", [["--seed", "1e3"], ["--n-envs", "2.0"], ["--eval-freq", "1e3"]])
def test_a_count_flag_reads_a_whole_number_as_its_option_does(flag, tmp_path):
    assert train_rl.main([*SMALL, *flag, "-n", "16", "--log-dir", str(tmp_path)]) == 0


def test_a_policy_built_from_options_it_cannot_take_is_a_value_error():
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    with pytest.raises(ValueError, match=r"features_extractor_kwargs=\{'bogus': 1\}: FlattenExtractor does not take"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"features_extractor_kwargs": {"bogus": 1}})
    with pytest.raises(ValueError, match="do not fit in this machine's memory"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": "mlp", "net_arch": [2**40]})
    with pytest.raises(ValueError, match=r"activation_fn=<class 'torch.nn.modules.linear.Linear'>: expected a "
                                         r"subclass of torch.nn.Module built with no arguments"):  # SB3 calls it so
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"activation_fn": torch.nn.Linear})
    model = MemoryPPO("MemoryPolicy", env, policy_kwargs={"activation_fn": torch.nn.LeakyReLU, "backbone": "mlp"})
    with pytest.raises(ValueError, match=r"^logger=3: expected an SB3 Logger"):
        model.set_logger(3)


def test_a_memory_state_too_large_for_the_machine_is_a_value_error():
    """A window of 2³¹ − 1 steps is larger than memory and swap together: the allocator refuses it at once (the
    state is zeroed, so overcommit would not defer it), and the error names the settings that size it."""
    env = make_vec_env("TMaze-v0", 2, 0, length=3)
    with pytest.raises(ValueError, match=r"^n_steps=64, n_envs=2: .* do not fit in this machine's memory"):
        MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": "gtrxl", "backbone_kwargs": {
            "memory_length": 2**31 - 1, "d_model": 8, "n_heads": 1}})


def test_an_auxiliary_loss_the_backbone_lacks_is_refused_before_anything_is_made(tmp_path, capsys):
    assert train_rl.main([*SMALL, "-p", "ppo.aux_coefs={a: 1}", "--log-dir", str(tmp_path / "runs")]) == 2
    assert "ppo.aux_coefs: 'a' is not an auxiliary loss of backbone 'gtrxl'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
