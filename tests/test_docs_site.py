"""The docs read as a product: the site builds with ``mkdocs build --strict``, its pages show no raw docstring
markup (Sphinx roles such as ``:class:``) and no escaped ``\\|``, its equations are typeset, every results file is
linked from the benchmarks index; and the terminal output of ``train_rl.py list`` and ``--help`` is plain text.

The site build needs the docs extra (``make docs`` installs it); without it that part is skipped.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import train_rl
from experiments.cli import listing
from experiments.cli.parser import plain_text

REPO = Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj):\s*(?:<code>|`)")
"""a role applied to a name (a page may still name a role, as ``<code>:class:</code>``)"""
RST = re.compile(r"``|:(?:class|mod|func|meth|attr|data|exc|obj):`")
PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL)


def fresh_site() -> Path | None:
    """The site ``make docs`` built in the repository (``site/``), if no file of the working tree is newer, as
    after CI's ``make docs``; ``None`` where there is none or it may be stale."""
    built = REPO / "site" / "sitemap.xml"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True)
    if not built.is_file() or listed.returncode != 0:
        return None
    since = built.stat().st_mtime
    sources = [REPO / name for name in listed.stdout.splitlines()]
    return REPO / "site" if all(p.stat().st_mtime < since for p in sources if p.is_file()) else None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``make docs`` builds it: the one it built (`fresh_site`), or a new build in a temporary
    directory."""
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module, reason="the docs extra is not installed (make docs installs it)")
    if (built := fresh_site()) is not None:
        return built
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                            capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-5000:]
    return out


def prose(page: Path) -> str:
    """A built page without its code blocks (a listing of source may quote a docstring as it is)."""
    return PRE.sub("", page.read_text())


def test_the_site_shows_no_sphinx_markup_and_no_escaped_pipes(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 50
    roles = [f"{p.relative_to(site)}: {m.group()}" for p in pages for m in ROLE.finditer(prose(p))]
    pipes = [str(p.relative_to(site)) for p in pages if "\\|" in prose(p)]
    literal_markers = [str(p.relative_to(site)) for p in pages if re.search(r"[^\s:]::</p>", prose(p))]
    assert not roles, f"raw roles: {roles[:20]}"
    assert not literal_markers, f"a reST '::' ends a paragraph on: {literal_markers}"
    assert not pipes, f"a literal \\| on: {pipes}"


def test_the_site_typesets_equations(site):
    ppo = (site / "learners" / "ppo" / "index.html").read_text()
    assert 'class="arithmatex"' in ppo and "\\operatorname{clip}" in ppo
    assert "mathjax" in ppo.lower()


def test_the_benchmarks_index_links_every_results_file(site):
    index = (site / "benchmarks" / "index.html").read_text()
    results = REPO / "benchmarks" / "results"
    tables = [p.relative_to(results) for p in results.rglob("*.md") if "__" not in str(p.relative_to(results))]
    unlinked = [str(t) for t in tables if f'href="../results/{t.with_suffix("")}/"' not in index]
    assert not unlinked, f"results files the benchmarks index does not link: {unlinked}"


def test_plain_text_strips_docstring_markup():
    assert plain_text("``x`` and :class:`~a.B`, :func:`a.f` here::") == "x and B, a.f here:"
    assert plain_text("a literal block::\n\n    code") == "a literal block:\n\n    code"


def test_list_prints_plain_text(capsys):
    assert listing.main([]) == 0
    out = capsys.readouterr().out
    assert "ppo" in out and "gtrxl" in out
    assert not RST.search(out), [line for line in out.splitlines() if RST.search(line)][:10]


def command_parser(name: str) -> argparse.ArgumentParser:
    make_parser = importlib.import_module(train_rl.COMMANDS[name].module).make_parser
    return make_parser(study_file=True) if name == "study" else make_parser()


@pytest.mark.parametrize("name", list(train_rl.COMMANDS))
def test_help_prints_plain_text(name):
    parser = command_parser(name)
    text = parser.format_help()
    assert not RST.search(text), [line for line in text.splitlines() if RST.search(line)][:10]


def test_benchmarks_hold_at_most_ten_scripts_and_notebooks_list_theirs():
    """``benchmarks/`` keeps the maintained benchmarks (at most ten scripts); the one-off investigations are in
    ``notebooks/``, each named in its README."""
    scripts = sorted(p.name for p in (REPO / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    assert len(scripts) <= 10, scripts
    readme = (REPO / "notebooks" / "README.md").read_text()
    unlisted = [p.name for p in (REPO / "notebooks").glob("*.py")
                if p.name != "common.py" and f"`{p.name}`" not in readme]
    assert not unlisted, f"notebooks/README.md does not name: {unlisted}"
