"""Mistakes in loading or building a learner name what to use: a model saved by another learner names
both classes, SB3's policy aliases point to MemoryPolicy, and a bad argument of `load` is named with its value."""

from __future__ import annotations

import zipfile

import pytest
from stable_baselines3 import PPO

from agents import VMPO, MemoryPPO, saved_learner
from envs import make_vec_env
from envs.rules import ConfigError

TINY = {"n_steps": 8, "batch_size": 16, "segment_length": 4, "policy_kwargs": {"backbone": "mlp"}}


@pytest.fixture
def env():
    venv = make_vec_env("TMaze-v0", 2, 0, length=3)
    yield venv
    venv.close()


@pytest.mark.parametrize("saver,loader", [(VMPO, MemoryPPO), (MemoryPPO, VMPO)])
def test_loading_another_learners_model_names_both_classes(saver, loader, env, tmp_path):
    saver("MemoryPolicy", env, **TINY).save(tmp_path / "model.zip")
    assert saved_learner(tmp_path / "model.zip") == saver.__name__
    assert saved_learner(tmp_path / "model") == saved_learner(tmp_path) == saver.__name__  # as load takes it
    (tmp_path / "junk.zip").write_text("no zip")
    for path, message in ((tmp_path / "missing", "no saved model there"), (tmp_path / "junk.zip", "not a zip file"),
                          (3, "expected the path of a model")):
        with pytest.raises(ValueError, match=f"^path.*{message}"):
            saved_learner(path)
    with pytest.raises(ValueError, match=f"^path='.*model': holds a {saver.__name__} model, which "
                                         f"{loader.__name__}.load cannot load"):
        loader.load(tmp_path / "model")  # SB3 adds the .zip
    assert type(saver.load(tmp_path / "model.zip")) is saver


@pytest.mark.parametrize("alias", ["MlpPolicy", "CnnPolicy"])
def test_sb3_policy_aliases_suggest_memory_policy(alias, env):
    with pytest.raises(ValueError, match=f"policy '{alias}' is not one of MemoryPPO's .*'MemoryPolicy'"):
        MemoryPPO(alias, env, **TINY)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A run directory holding a MemoryPPO model.zip."""
    run = tmp_path_factory.mktemp("run")
    venv = make_vec_env("TMaze-v0", 2, 0, length=3)
    MemoryPPO("MemoryPolicy", venv, **TINY).save(run / "model.zip")
    venv.close()
    return run


@pytest.mark.parametrize("path", [None, 123, b"model.zip", "", ["model.zip"]])
def test_load_names_a_path_of_the_wrong_kind(path):
    with pytest.raises(ConfigError, match=r"^path=.*: expected the path of a model save wrote"):
        MemoryPPO.load(path)


def test_load_takes_a_run_directory_holding_model_zip(saved, tmp_path):
    assert type(MemoryPPO.load(saved)) is MemoryPPO
    assert type(MemoryPPO.load(str(saved))) is MemoryPPO
    with pytest.raises(ConfigError, match=r"^path='.*': a directory holding no model.zip; expected"):
        MemoryPPO.load(tmp_path)


def test_a_missing_model_is_a_value_error_and_a_file_not_found_error(tmp_path):
    with pytest.raises(ValueError, match=r"^path: no saved model there \(nor with .zip added\): '.*missing'; "
                       ) as error:
        MemoryPPO.load(tmp_path / "missing")
    assert isinstance(error.value, FileNotFoundError) and "\n" not in str(error.value)


def test_load_refuses_a_file_that_is_no_saved_model(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ConfigError, match=r"^path='.*notes.txt': not a zip file \(or one cut short\); expected the "
                                          r"path of a model"):
        MemoryPPO.load(tmp_path / "notes.txt")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("readme", "hello")
    with pytest.raises(ConfigError, match=r"^path='.*other.zip': a zip file without the 'data' entry save writes"):
        MemoryPPO.load(tmp_path / "other.zip")
    with zipfile.ZipFile(tmp_path / "changed.zip", "w") as archive:
        archive.writestr("data", "{not json")
    with pytest.raises(ConfigError, match=r"^path='.*changed.zip': its 'data' entry is not the JSON save writes"):
        MemoryPPO.load(tmp_path / "changed.zip")
    PPO("MlpPolicy", make_vec_env("CartPole-v1", 1), n_steps=16, batch_size=16).save(tmp_path / "sb3.zip")
    with pytest.raises(ConfigError, match=r"^path='.*sb3.zip': holds a model of the policy ActorCriticPolicy, not a "
                                          r"memory learner's \(MemoryPolicy\)"):
        MemoryPPO.load(tmp_path / "sb3.zip")


@pytest.mark.parametrize("custom_objects", [[1], "lr_schedule", {1: 2}])
def test_load_names_custom_objects_of_the_wrong_kind(custom_objects, saved):
    with pytest.raises(ConfigError, match=r"^custom_objects=.*: expected None or a dict of saved names"):
        MemoryPPO.load(saved / "model.zip", custom_objects=custom_objects)


@pytest.mark.parametrize("where", ["kwargs", "custom_objects"])
def test_load_names_policy_kwargs_of_the_wrong_kind(where, saved):
    given = {"policy_kwargs": [1]}
    with pytest.raises(ConfigError, match=r"^(custom_objects\['policy_kwargs'\]|policy_kwargs)=\[1\]: expected a dict"):
        MemoryPPO.load(saved / "model.zip", **(given if where == "kwargs" else {"custom_objects": given}))


def test_load_names_only_the_policy_kwargs_given_and_what_was_saved(saved):
    with pytest.raises(ConfigError, match=r"^policy_kwargs do not equal the stored policy kwargs of the model "
                                          r"'.*model.zip': net_arch=\[1\] \(stored: none\), backbone not given "
                                          r"\(stored: 'mlp'\).*; load builds the policy it was saved with") as error:
        MemoryPPO.load(saved / "model.zip", policy_kwargs={"net_arch": [1]})
    assert "gtrxl" not in str(error.value) and "\n" not in str(error.value)
    assert type(MemoryPPO.load(saved / "model.zip", policy_kwargs={"backbone": "mlp"})) is MemoryPPO


def test_load_takes_sb3s_own_arguments_and_checks_them(saved, capsys):
    MemoryPPO.load(saved / "model.zip", print_system_info=True, force_reset=False)
    assert "OS:" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"^force_reset='no': expected true or false"):
        MemoryPPO.load(saved / "model.zip", force_reset="no")


def test_load_names_a_model_whose_weights_entry_is_damaged(saved, tmp_path):
    """A zip whose `data` reads but whose `policy.pth` is no torch file is a `ConfigError` naming the file, not
    torch's `UnpicklingError`."""
    damaged = tmp_path / "damaged.zip"
    with zipfile.ZipFile(saved / "model.zip") as source, zipfile.ZipFile(damaged, "w") as target:
        for entry in source.namelist():
            target.writestr(entry, b"garbage" if entry == "policy.pth" else source.read(entry))
    with pytest.raises(ConfigError, match=r"^path='.*damaged.zip': '.*damaged.zip' does not load \(UnpicklingError"):
        MemoryPPO.load(damaged)


def _changed(saved, tmp_path, change) -> str:
    """The saved model with its `data` entry changed by `change` (a function of the decoded JSON)."""
    import json

    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(saved / "model.zip") as source, zipfile.ZipFile(changed, "w") as target:
        for entry in source.namelist():
            content = source.read(entry)
            target.writestr(entry, json.dumps(change(json.loads(content))) if entry == "data" else content)
    return str(changed)


GARBLED = {":type:": "<class 'dict'>", ":serialized:": "abc"}


@pytest.mark.parametrize(("change", "message"), [
    (lambda data: {**data, "n_steps": "abc"}, r"its saved n_steps='abc': expected an integer >= 1"),
    (lambda data: {**data, "n_steps": -4}, r"its saved n_steps=-4: expected an integer >= 1"),
    (lambda data: {**data, "n_envs": "x"}, r"its saved n_envs='x': expected an integer >= 1"),
    (lambda data: {**data, "policy_kwargs": 5}, r"its saved policy_kwargs=5: expected a mapping"),
    (lambda data: {**data, "policy_kwargs": GARBLED}, r"its saved 'policy_kwargs' entry does not load \(Error"),
    (lambda data: {**data, "observation_space": GARBLED}, r"its saved 'observation_space', 'action_space' entries "
                                                          r"do not load"),
    (lambda data: {k: v for k, v in data.items() if k != "observation_space"},
     r"its 'data' entry lacks 'observation_space', which save writes"),
    (lambda data: {k: v for k, v in data.items() if k != "policy_class"}, r"its 'data' entry lacks 'policy_class'"),
    (lambda data: [1, 2], r"its 'data' entry is list, not the mapping save writes"),
])
@pytest.mark.parametrize("with_env", [False, True])
def test_load_names_a_saved_entry_changed_since(saved, tmp_path, env, change, message, with_env):
    """A model whose `data` was edited after saving is refused naming the entry and why, never with the TypeError,
    KeyError or base64 error SB3 or a cross-option check would raise on it."""
    with pytest.raises(ConfigError, match=rf"^path='.*changed.zip': {message}"):
        MemoryPPO.load(_changed(saved, tmp_path, change), env=env if with_env else None)
