"""``model.save`` takes what SB3's takes (a path, with ``.zip`` added when it has no suffix, or an open binary file)
and refuses with a ``ValueError`` naming ``path`` what is neither, or a path under a file, and naming ``exclude`` or
``include`` when it is no list of names; the file is written whole or not at all (the full-disk case is in
test_faults.py)."""

from __future__ import annotations

import io

import pytest

from agents import VMPO, MemoryPPO
from envs.rules import ConfigError


@pytest.fixture(scope="module")
def model() -> MemoryPPO:
    return MemoryPPO("MemoryPolicy", "CartPole-v1", n_steps=16, policy_kwargs={"backbone": "mlp"})


@pytest.mark.parametrize("path", [None, 123, "", b"model.zip"])
def test_save_names_a_path_of_the_wrong_kind(model, path):
    with pytest.raises(ConfigError, match=r"^path=.*: expected a file path or an open binary file$"):
        model.save(path)


def test_save_refuses_a_directory(model, tmp_path):
    for path in (f"{tmp_path / 'new'}/", tmp_path / "folder.zip"):
        (tmp_path / "folder.zip").mkdir(exist_ok=True)
        with pytest.raises(ConfigError, match="is a directory; expected a file path"):
            model.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.zip"]


@pytest.mark.parametrize("under", ["a_file/model.zip", "a_file/deeper/model"])
def test_save_refuses_a_path_under_a_file(model, tmp_path, under):
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(ConfigError, match=rf"^path='.*{under}': '.*a_file' is a file; expected a path in a directory$"):
        model.save(tmp_path / under)
    assert (tmp_path / "a_file").read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["a_file"]


@pytest.mark.parametrize(("key", "names"), [("exclude", 5), ("include", "env"), ("exclude", [1, 2]),
                                             ("include", {"env": 1}.values())])
def test_save_names_an_exclude_or_include_that_is_no_list_of_names(model, tmp_path, key, names):
    with pytest.raises(ConfigError, match=rf"^{key}=.*: expected a list of the model's attribute names"):
        model.save(tmp_path / "model.zip", **{key: names})
    with pytest.raises(ConfigError, match=rf"^{key}="):
        model.save(io.BytesIO(), **{key: names})
    assert not list(tmp_path.iterdir())


def test_save_adds_zip_makes_folders_and_writes_open_files_as_sb3_does(model, tmp_path):
    model.save(tmp_path / "a" / "b" / "model")
    assert sorted(p.name for p in (tmp_path / "a" / "b").iterdir()) == ["model.zip"]
    buffer = io.BytesIO()
    model.save(buffer)
    assert buffer.getvalue()[:2] == b"PK"
    buffer.seek(0)
    assert MemoryPPO.load(buffer).policy_kwargs["backbone"] == "mlp"


def test_vmpo_saves_the_same_way(tmp_path):
    learner = VMPO("MemoryPolicy", "CartPole-v1", n_steps=16, policy_kwargs={"backbone": "mlp"})
    learner.save(tmp_path / "vmpo")
    with pytest.raises(ConfigError, match="^path=None"):
        learner.save(None)
    assert isinstance(VMPO.load(tmp_path / "vmpo.zip"), VMPO)
