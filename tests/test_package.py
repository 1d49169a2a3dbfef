"""engram as a package: ``import engram`` gives the public API and the version, setup.cfg lists every package, the
commands name themselves as they were started, and a wheel built from this tree installs into a fresh environment
and runs there from any directory, its configuration files included."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import setuptools

import agents
import engram
import envs
import policies
from experiments.cli.parser import invocation, program

REPO = Path(__file__).resolve().parents[1]
NOT_BUILT_FROM = (".git", ".venv", "runs", "build", "dist", "site", "*.egg-info", "__pycache__", ".pytest_cache",
                  ".ruff_cache", "benchmarks", "docs", "tests")
"""what the copy of the source tree that the wheel is built from leaves out"""


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def test_engram_exposes_the_public_api_and_the_version():
    assert engram.MemoryPPO is agents.MemoryPPO and engram.VMPO is agents.VMPO and engram.ALGOS is agents.ALGOS
    assert engram.make_vec_env is envs.make_vec_env and engram.ENV_IDS is envs.ENV_IDS
    assert (engram.BACKBONES, engram.ATTENTIONS, engram.POSITIONS) == (
        policies.BACKBONES, policies.ATTENTIONS, policies.POSITIONS)
    assert set(engram.__all__) <= set(dir(engram))
    assert engram.__version__ == setup_cfg()["metadata"]["version"]
    with pytest.raises(AttributeError, match="module 'engram' has no attribute 'PPO'"):
        engram.PPO  # noqa: B018


def test_the_version_of_a_source_tree_never_installed_is_setup_cfgs(monkeypatch):
    def not_installed(name: str) -> str:
        raise engram.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(engram.metadata, "version", not_installed)
    assert engram._version() == setup_cfg()["metadata"]["version"]


def test_importing_engram_loads_no_torch():
    code = "import sys, engram; print(sorted({'torch', 'stable_baselines3'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_setup_cfg_lists_every_package_of_the_tree():
    listed = setup_cfg()["options"]["packages"].split()
    packages = ["agents*", "engram*", "envs*", "experiments*", "lm*", "policies*"]
    found = setuptools.find_packages(str(REPO), include=packages)
    assert sorted(listed) == sorted([*found, "engram.configs"])


@pytest.mark.parametrize("argv0,name", [
    ("/venv/bin/engram", "engram"),
    ("/site-packages/engram/__main__.py", "engram"), ("train_rl.py", "train_rl.py"),
    ("/work/train_rl.py", "train_rl.py"), ("/venv/lib/site-packages/pytest/__main__.py", "train_rl.py"),
])
def test_the_program_is_named_as_it_was_started(argv0, name, monkeypatch):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert program() == name
    assert invocation() == (["engram"] if name == "engram" else ["python", "train_rl.py"])


# --- the wheel, installed outside the repository ----------------------------------------------------------------


class Installed:
    """A fresh virtual environment outside the repository with engram's wheel installed, its third-party packages
    those of this environment (a ``.pth`` file: no download), and a working directory outside the repository."""

    def __init__(self, root: Path) -> None:
        source, dist, self.prefix, self.cwd = root / "source", root / "dist", root / "venv", root / "work"
        shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_BUILT_FROM))
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(dist)],
                       check=True, capture_output=True, text=True, timeout=300)
        (self.wheel,) = dist.glob("engram-*.whl")
        venv.create(self.prefix, with_pip=False)
        self.python, self.engram = self.prefix / "bin" / "python", self.prefix / "bin" / "engram"
        site = Path(sysconfig.get_path("purelib", vars={"base": str(self.prefix), "platbase": str(self.prefix)}))
        (site / "third_party.pth").write_text(sysconfig.get_path("purelib") + "\n")
        subprocess.run([*pip, "--python", str(self.python), "install", "--no-deps", str(self.wheel)],
                       check=True, capture_output=True, text=True, timeout=300)
        self.cwd.mkdir()
        self.env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")

    def run(self, *argv: str | Path) -> str:
        """stdout of a command of the environment (``engram``, ``python``) run in the working directory; it must
        exit with status 0."""
        result = subprocess.run([str(word) for word in argv], cwd=self.cwd, env=self.env, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, f"{argv}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    root = tmp_path_factory.mktemp("package")
    assert REPO not in root.parents
    return Installed(root)


def test_the_wheel_holds_the_packages_the_command_and_the_configs(installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert {"train_rl.py", "engram/__init__.py", "engram/__main__.py", "engram/configs/demo.yaml",
            "engram/configs/studies/demo.yaml", "engram/configs/tune/ppo.yaml", "engram/configs/lm/python.yaml",
            "agents/__init__.py", "policies/lm/__init__.py", "experiments/cli/train.py"} <= set(names)
    shipped = {f"engram/configs/{path.relative_to(REPO / 'configs').as_posix()}"
               for pattern in ("*.yaml", "*.yml") for path in (REPO / "configs").rglob(pattern)}
    assert "engram/configs/hyperparams/ppo.yml" in shipped and shipped <= set(names)
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "engram = train_rl:run" in zipfile.ZipFile(installed.wheel).read(entry_points).decode()


def test_the_installed_package_is_imported_with_its_configs(installed):
    code = ("import engram, train_rl\nfrom experiments.studies import tune\n"
            "from experiments.config_files import config_path\n"
            "from experiments.studies.study import Grid\n"
            "print(engram.__file__, engram.__version__, train_rl.__file__, tune.SPACE_DIR, sep='\\n')\n"
            "print(Grid.from_file(config_path('demo', 'studies')).config_file)")
    engram_file, version, train_rl_file, space_dir, study_config = installed.run(installed.python, "-c", code).split()
    for path in (engram_file, train_rl_file, space_dir, study_config):
        assert installed.prefix in Path(path).parents, path  # not the repository's editable install
    assert version == engram.__version__
    assert Path(space_dir, "ppo.yaml").is_file()
    assert Path(study_config) == Path(engram_file).parent / "configs" / "memory_chain.yaml"
    assert Path(study_config).is_file()


def test_the_engram_command_runs_every_kind_of_command(installed):
    assert installed.run(installed.engram, "--help").startswith("usage: engram [train] [OPTIONS]\n")
    assert installed.run(installed.python, "-m", "engram", "list", "--help").startswith("usage: engram list")
    assert "\nTMaze-v0 " in "\n" + installed.run(installed.engram, "list", "envs")
    configs = installed.run(installed.engram, "list", "configs")
    assert configs.startswith("configs/demo.yaml ") and "\nconfigs/studies/demo.yaml " in configs
    assert "configs/hyperparams/ppo.yml#TMaze-v0 " in installed.run(installed.engram, "list", "hyperparams")

    output = installed.run(installed.engram, "train", "--config", "demo", "-n", "512", "--log-dir", "runs")
    run = installed.cwd / "runs" / "TMaze-v0__ppo-gtrxl__0"
    assert (run / "model.zip").is_file() and (run / "summary.json").is_file()
    assert f"evaluate:    engram evaluate {Path('runs', run.name)}" in output
