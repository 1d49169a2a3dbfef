"""The docs document everything the code offers, and the commands in README.md and the docs run as written.

The docs are ``docs/**/*.md`` with their generated blocks expanded by ``docs/hooks.py`` (what ``mkdocs build``
shows); README.md is only held to its size, its backbone table and its commands.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agents import ALGOS
from envs import ENV_IDS, FAMILIES
from experiments.config import FIELDS, POLICY_OPTIONS, algo_defaults
from policies import ATTENTIONS, BACKBONES, POSITIONS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SHELL_FENCE = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.DOTALL | re.MULTILINE)
FILE_FENCE = re.compile(r'^```python title="([^"]+)"\n(.*?)^```', re.DOTALL | re.MULTILINE)
SNIPPET_FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
CHEAP_STEPS = {"512"}
"""training budgets (``-n``) a docs test may run"""


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = load_hooks()
PAGES = sorted((REPO / "docs").rglob("*.md"))


@pytest.fixture(scope="module")
def docs() -> str:
    """Every docs page as the site shows it: generated blocks expanded."""
    return "\n".join(HOOKS.expand(page.read_text()) for page in PAGES)


def documented(name: str, text: str) -> bool:
    return f"`{name}`" in text


@pytest.mark.parametrize("backbone", list(BACKBONES))
def test_every_backbone_and_option_is_documented(docs, backbone):
    assert documented(backbone, docs)
    missing = [option for option in BACKBONES[backbone].options() if not documented(option, docs)]
    assert not missing, f"{backbone}: options missing from the docs: {missing}"


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_every_attention_has_a_catalogue_entry(docs, attention):
    assert f"### `{attention}`" in docs, f"the attention catalogue lacks {attention!r}"


@pytest.mark.parametrize("position", list(POSITIONS))
def test_every_position_has_a_catalogue_entry(docs, position):
    assert f"### `{position}`" in docs, f"the position catalogue lacks {position!r}"


@pytest.mark.parametrize("algo", list(ALGOS))
def test_every_learner_option_is_documented(docs, algo):
    assert documented(algo, docs)
    missing = [option for option in algo_defaults(algo) if not documented(option, docs)]
    assert not missing, f"{algo}: options missing from the docs: {missing}"


def test_every_flag_run_setting_and_policy_option_is_documented(docs):
    missing = [flag for flag in HOOKS.flag_names() if not documented(flag, docs)]
    missing += [name for name in FIELDS if not documented(name, docs)]
    missing += [f"policy.{name}" for name in POLICY_OPTIONS if not documented(f"policy.{name}", docs)]
    assert not missing, f"missing from the docs: {missing}"


def test_every_env_family_task_and_config_is_documented(docs):
    missing = [name for name in (*FAMILIES, *ENV_IDS) if not documented(name, docs)]
    missing += [str(path.relative_to(REPO)) for path in (REPO / "configs").rglob("*.yaml")
                if not documented(str(path.relative_to(REPO)), docs)]
    assert not missing, f"missing from the docs: {missing}"


def test_every_results_file_is_shown_on_a_page():
    """``benchmarks/results/`` holds what the docs show: each table is linked from a page (the site publishes it
    under ``results/``), and each JSON sits beside its table. Run records inside result folders are read by the
    commands the pages give (``train_rl.py report``)."""
    results = REPO / "benchmarks" / "results"
    raw = "\n".join(page.read_text() for page in PAGES)
    tables = [p for p in results.rglob("*.md") if "__" not in str(p.relative_to(results))]
    unshown = [str(p.relative_to(results)) for p in tables if f"results/{p.relative_to(results)}" not in raw]
    unshown += [p.name for p in results.glob("*.json") if not p.with_suffix(".md").exists()]
    assert not unshown, f"results no docs page shows: {unshown}"


def test_an_unknown_generated_block_is_refused():
    with pytest.raises(KeyError, match="unknown generated block 'nothing'"):
        HOOKS.expand("<!-- generated: nothing -->")


def test_readme_is_a_few_screens():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    long = [n for n, line in enumerate(lines, 1) if len(line) > 200]
    assert not long, f"README lines over 200 characters: {long}"


def test_readme_backbone_table_names_registered_backbones():
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", README.read_text(), re.MULTILINE)
    assert rows and set(rows) == set(BACKBONES), f"README's backbone table: {sorted(set(rows) ^ set(BACKBONES))}"


def test_readme_links_point_at_files():
    targets = re.findall(r"\]\(([^)#]+)\)", README.read_text())
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


# --- the commands, as a new user types them ---------------------------------------------------------------------


def shell_commands(text: str) -> list[str]:
    """The commands of a page's shell blocks, continuation lines joined and comments dropped."""
    commands = []
    for block in SHELL_FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def is_cheap(command: str) -> bool:
    """``--help``, ``list …`` or a run of a few hundred steps, as ``engram …`` or ``python train_rl.py …``: seconds."""
    words = shlex.split(command)
    if words[:1] == ["engram"]:
        words = ["python", "train_rl.py", *words[1:]]
    if not words or Path(words[0]).name != "python" and words[0] != ".venv/bin/python":
        return False
    if "--help" in words:
        return True
    if words[1:2] == ["train_rl.py"] and words[2:3] == ["list"]:
        return True
    budget = next((b for flag, b in zip(words, words[1:], strict=False) if flag in ("-n", "--total-timesteps")), None)
    return budget in CHEAP_STEPS


def page_files(text: str) -> dict[str, str]:
    """The files a page writes out in full: its ``python title="name.py"`` blocks."""
    return dict(FILE_FENCE.findall(text))


SESSION_PAGES = [page for page in PAGES if page_files(page.read_text())]
"""pages whose commands use files they show: run whole, in order (:func:`test_a_page_with_files_runs_as_a_session`)"""
CHEAP = sorted({command for path in [README, *PAGES] if path not in SESSION_PAGES
                for command in shell_commands(path.read_text()) if is_cheap(command)})


def test_the_extraction_finds_the_readme_commands():
    readme = [c for c in shell_commands(README.read_text()) if is_cheap(c)]
    assert "engram --help" in readme and "engram list backbones" in readme
    assert any("-n 512" in command for command in readme)
    assert not is_cheap("python train_rl.py --config configs/demo.yaml -n 150000")
    assert not is_cheap("engram study demo") and is_cheap("python train_rl.py list configs")


def run_as_a_user(script: str, tmp_path: Path) -> None:
    """Run ``script`` with bash in a directory that looks like the clone (the repository's entries linked in),
    with the virtual environment's ``python`` first on PATH, as after ``source .venv/bin/activate``."""
    for entry in REPO.iterdir():
        if entry.name not in (".git", "runs", "site"):
            (tmp_path / entry.name).symlink_to(entry)
    if not (tmp_path / ".venv").exists():
        (tmp_path / ".venv").symlink_to(sys.prefix)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"{script}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", CHEAP)
def test_documented_command_runs_as_written(command, tmp_path):
    run_as_a_user(command, tmp_path)


def test_readme_first_steps_run_in_order(tmp_path):
    """The README's block after the set-up (activate, help, list, a 512-step run, evaluate it), as one session."""
    block = next(block for block in SHELL_FENCE.findall(README.read_text()) if "source .venv/bin/activate" in block)
    assert "-n 512" in block and "evaluate" in block
    run_as_a_user(block, tmp_path)


@pytest.mark.parametrize("page", SESSION_PAGES, ids=lambda page: page.name)
def test_a_page_with_files_runs_as_a_session(page, tmp_path):
    """A page that shows a file in full (``python title="my_pomdp.py"``): the file saved as shown, then every
    command of its shell blocks in order, then each of its other Python blocks as a script."""
    text = page.read_text()
    for name, content in page_files(text).items():
        (tmp_path / name).write_text(content)
    snippets = []
    for index, snippet in enumerate(SNIPPET_FENCE.findall(text)):
        (tmp_path / f"snippet_{index}.py").write_text(snippet)
        snippets.append(f"python snippet_{index}.py")
    run_as_a_user("\n".join([*shell_commands(text), *snippets]), tmp_path)
