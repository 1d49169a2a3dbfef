"""MkDocs hooks: the parts of the docs that are read from the code, so they cannot fall behind it.

A page asks for a generated block with a marker alone on its line, ``<!-- generated: NAME -->`` (or
``NAME:ARG``); :func:`expand` replaces it when the site is built. The blocks are built from the
registries (``policies.BACKBONES``, ``policies.ATTENTIONS``, ``policies.POSITIONS``, ``agents.ALGOS``,
``envs``), the run settings (``experiments.config.RunConfig``), the learners' signatures and docstrings,
and ``train_rl.py``'s argument parsers. ``tests/test_docs.py`` reads the expanded pages to check that
every option, flag, backbone, attention, position and environment family is documented.

The hooks also publish ``benchmarks/results/`` (its Markdown and figures) under ``results/`` in the site,
so a page links a results file as ``../results/NAME.md``.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the checkout's packages, whatever the virtual environment points at

MARKER = re.compile(r"^<!-- generated: ([a-z0-9_-]+)(?::([a-z0-9_-]+))? -->$", re.MULTILINE)
MEANINGS: dict[str, dict[str, str]] = yaml.safe_load((Path(__file__).parent / "options.yml").read_text())
"""hand-written meanings of options whose code has no docstring for them (``docs/options.yml``)"""
RESULT_SUFFIXES = (".md", ".png")


def cell(text: Any) -> str:
    """A value or sentence as one Markdown table cell: a ``|`` outside code becomes ``&#124;`` (inside code the
    table extension leaves it alone, and an escape would show)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(part if i % 2 else part.replace("|", "&#124;") for i, part in enumerate(parts))


def code(value: Any) -> str:
    """A default value as inline code (``—`` for none)."""
    if value is None or value is inspect.Parameter.empty:
        return "—"
    if hasattr(value, "start") and hasattr(value, "end"):  # SB3's LinearSchedule
        return f"`lin_{value.start:g}_{value.end:g}`"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def rst_to_markdown(text: str) -> str:
    """Docstring markup as Markdown: ``x`` → `x`, :class:`~a.B` → `B`, :func:`a.f` → `a.f`."""
    def role(match: re.Match[str]) -> str:
        target = match.group(2)
        return f"`{target.split('.')[-1] if match.group(1) else target}`"

    text = re.sub(r":[a-z]+:`(~?)([^`]+)`", role, text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def docstring(obj: Any) -> str:
    """``obj``'s docstring, without doctest examples, as Markdown."""
    text = inspect.getdoc(obj) or ""
    text = re.split(r"\n\s*Examples?:\n", text)[0]
    text = "\n".join(line.strip() if line.startswith("    ") else line for line in text.splitlines())
    return rst_to_markdown(text).strip()


def first_sentence(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring, on one line."""
    return " ".join(docstring(obj).split("\n\n")[0].split())


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def keyword_options(cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The keyword-only ``__init__`` arguments of ``cls`` and their defaults."""
    params = inspect.signature(cls.__init__).parameters
    return {name: p.default for name, p in params.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in skip}


def param_docs(*classes: type) -> dict[str, str]:
    """``:param name: text`` entries of the docstrings of ``classes`` and their bases (first one wins)."""
    found: dict[str, str] = {}
    for cls in classes:
        for base in inspect.getmro(cls):
            for name, text in re.findall(r":param (\w+):(.*?)(?=\n\s*:\w|\Z)", base.__doc__ or "", re.DOTALL):
                found.setdefault(name, rst_to_markdown(" ".join(text.split())))
    return found


# --- backbones -------------------------------------------------------------------------------------------------


def backbones() -> str:
    """One line per registered backbone: its name, class and summary."""
    from policies import BACKBONES

    rows = [[f"`{name}`", f"`{spec.cls.__module__}.{spec.cls.__name__}`", spec.summary]
            for name, spec in BACKBONES.items()]
    return table(["name", "class", "what it is"], rows)


def backbone_options() -> str:
    """Every backbone option: the backbones that take it, their defaults, and its meaning."""
    from policies import BACKBONES

    takers: dict[str, dict[str, Any]] = {}
    for name, spec in BACKBONES.items():
        for option, default in spec.options().items():
            takers.setdefault(option, {})[name] = default
    rows = []
    for option, defaults in takers.items():
        names = ", ".join(f"`{name}`" for name in defaults)
        values = {code(value) for value in defaults.values()}
        default = values.pop() if len(values) == 1 else "; ".join(f"{n}: {code(v)}" for n, v in defaults.items())
        rows.append([f"`{option}`", names, default, MEANINGS["backbone"].get(option, "")])
    return table(["option", "backbones", "default", "meaning"], rows)


# --- attentions and positions ----------------------------------------------------------------------------------


def entry_class(entry: Any) -> type:
    """The class behind a registry entry (the entry itself, or its ``cls``)."""
    return entry if inspect.isclass(entry) else getattr(entry, "cls", type(entry))


def entry_options(entry: Any) -> dict[str, Any]:
    """An entry's own settings (a registry that knows them is asked first, :func:`catalogue`): its ``options``,
    or else its class's keyword-only arguments."""
    options = None if inspect.isclass(entry) else getattr(entry, "options", None)
    if options is not None:
        return dict(options() if callable(options) else options)
    return keyword_options(entry_class(entry), skip=("max_distance", "dropout"))


def catalogue(registry: dict[str, Any], setting: str) -> str:
    """One section per registry entry: summary, complexity, options (default and valid values) and the class's
    docstring."""
    from policies.options import option_rules as option_rules_of

    sections = []
    for name, entry in registry.items():
        cls = entry_class(entry)
        paragraphs = docstring(cls).split("\n\n")
        summary = getattr(entry, "summary", None) or " ".join(paragraphs.pop(0).split())
        lines = [f"### `{name}`", "", rst_to_markdown(summary), "",
                 f"Select it with `{setting}={name}`. Class: `{cls.__module__}.{cls.__qualname__}`."]
        complexity = getattr(entry, "complexity", None) or getattr(cls, "complexity", None)
        if complexity:
            lines += ["", f"Time its paper claims for n tokens: {complexity}."]
        options = registry.options(name) if callable(getattr(registry, "options", None)) else entry_options(entry)
        if options:
            rules = option_rules_of(cls.__init__)
            lines += ["", table(["option", "default", "valid values"],
                                [[f"`{option}`", code(default), rules[option].describe() if option in rules else ""]
                                 for option, default in options.items()])]
        lines += ["", "\n\n".join(paragraphs)]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def attentions() -> str:
    from policies import ATTENTIONS

    return catalogue(ATTENTIONS, "attention")


def positions() -> str:
    from policies import POSITIONS

    return catalogue(POSITIONS, "position")


# --- learners ---------------------------------------------------------------------------------------------------


def learners() -> str:
    from agents import ALGOS

    rows = [[f"`{name}`", f"`{cls.__module__}.{cls.__name__}`", first_sentence(cls)] for name, cls in ALGOS.items()]
    return table(["`--algo`", "class", "loss"], rows)


def algo_options(name: str) -> str:
    """A learner's options with their defaults (from its signature) and meanings (docstrings, docs/options.yml)."""
    from stable_baselines3 import PPO

    from agents import ALGOS
    from experiments.config import algo_defaults

    docs = param_docs(ALGOS[name], PPO)
    meanings = {**MEANINGS.get("learners", {}), **MEANINGS.get(name, {})}
    rows = [[f"`{option}`", code(default), meanings.get(option) or docs.get(option, "")]
            for option, default in algo_defaults(name).items()]
    return table(["option", "default", "meaning"], rows)


# --- run settings, policy options and flags ---------------------------------------------------------------------


def run_settings() -> str:
    """Every field of ``RunConfig``: default, the flag that sets it, and its doc (the field's metadata)."""
    from experiments.config import FIELDS, field_default

    flags: dict[str, str] = {}
    for _, action in parser_actions():  # the main parser comes first: its flag names a setting
        if action.option_strings:
            flags.setdefault(action.dest, action.option_strings[0])
    rows = [[f"`{name}`", code(field_default(spec)), f"`{flags[name]}`" if name in flags else "`-p`",
             rst_to_markdown(spec.metadata["doc"])] for name, spec in FIELDS.items()]
    return table(["setting", "default", "set with", "meaning"], rows)


def option_rules() -> str:
    """The valid values of every setting and option as its rule describes them (``describe()``): the run settings,
    then the options of each learner, backbone, attention, position scheme and of the policy, read from the
    annotations of their constructors (:mod:`policies.options`); an option's row names every component whose
    rule for it reads the same."""
    from agents import ALGOS
    from experiments.config import FIELDS, POLICY_OPTIONS, algo_defaults
    from policies import ATTENTIONS, BACKBONES, POSITIONS
    from policies.options import option_rules as rules_of
    from policies.policy import MemoryActorCriticPolicy

    rows = [[f"`{name}`", "run setting", spec.metadata["rule"].describe()] for name, spec in FIELDS.items()]
    kinds = [("learner", {name: (cls, algo_defaults(name)) for name, cls in ALGOS.items()}),
             ("backbone", {name: (spec.cls, spec.options()) for name, spec in BACKBONES.items()}),
             ("attention", {name: (entry.cls, ATTENTIONS.options(name)) for name, entry in ATTENTIONS.items()}),
             ("position", {name: (entry.cls, POSITIONS.options(name)) for name, entry in POSITIONS.items()})]
    for kind, components in kinds:
        takers: dict[tuple[str, str], list[str]] = {}
        for name, (cls, options) in components.items():
            rules = rules_of(cls.__init__)
            for option in options:
                takers.setdefault((option, rules[option].describe()), []).append(f"`{name}`")
        prefix = {"attention": "attention_options.", "position": "position_options."}.get(kind, "")
        rows += [[f"`{prefix}{option}`", f"{kind} " + ", ".join(names), valid]
                 for (option, valid), names in takers.items()]
    policy_rules = rules_of(MemoryActorCriticPolicy.__init__, spelled=True)
    rows += [[f"`policy.{option}`", "policy", policy_rules[option].describe()] for option in POLICY_OPTIONS]
    return table(["setting or option", "of", "valid values"], rows)


def policy_options() -> str:
    from experiments.config import POLICY_OPTIONS

    rows = [[f"`policy.{name}`", code(default), MEANINGS["policy"].get(name, "")]
            for name, default in POLICY_OPTIONS.items()]
    return table(["option", "default", "meaning"], rows)


def parsers() -> Iterator[Any]:
    """Every argument parser of ``train_rl.py``: each command's ``make_parser`` (``train_rl.COMMANDS``) and its
    sub-commands."""
    import argparse
    import importlib

    import train_rl

    def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):
                    yield from walk(sub)

    for name, command in train_rl.COMMANDS.items():
        make_parser = importlib.import_module(command.module).make_parser
        yield from walk(make_parser(study_file=True) if name == "study" else make_parser())


def prog_name(parser: Any) -> str:
    """How a user calls the parser: ``train_rl.py`` for the training one (``train`` is the default command)."""
    return parser.prog.replace(" [train]", "")


def parser_actions() -> Iterator[tuple[Any, Any]]:
    for parser in parsers():
        for action in parser._actions:
            yield parser, action


def flags(prog: str | None = None) -> str:
    """The options of ``train_rl.py`` (or of the parser whose ``prog`` is given), from argparse."""
    import argparse

    sections = []
    for parser in parsers():
        if prog is not None and prog_name(parser) != prog:
            continue
        rows = []
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.metavar or action.dest}`"
            choices = f" Choices: {', '.join(map(str, action.choices))}." if action.choices else ""
            help_text = (action.help or "").replace("%(default)s", str(action.default))
            rows.append([names, rst_to_markdown(help_text) + choices])
        sections.append(f"**`{prog_name(parser)}`**\n\n" + table(["flag", "meaning"], rows))
    return "\n\n".join(sections)


def flag_names() -> list[str]:
    """Every ``--flag`` of every parser (for the docs test)."""
    return sorted({name for _, action in parser_actions() for name in action.option_strings
                   if name.startswith("--") and name != "--help"})


# --- environments and configs -----------------------------------------------------------------------------------


def env_families() -> str:
    from envs import FAMILIES, list_env_ids

    rows = []
    for family in FAMILIES:
        try:
            ids = list_env_ids(family)
        except ImportError:  # an optional family whose package is not installed
            ids = []
        example = f"`{ids[0]}`" if ids else "(optional package not installed)"
        rows.append([f"`{family}`", len(ids), example])
    return table(["family", "ids here", "example"], rows)


def engram_tasks() -> str:
    from envs import ENV_IDS, env_kwargs

    rows = [[f"`{env_id}`", ", ".join(f"`{k}`" for k in env_kwargs(env_id)), first_sentence(cls)]
            for env_id, cls in ENV_IDS.items()]
    return table(["id", "keyword arguments", "task"], rows)


def configs() -> str:
    """Every shipped config file with its opening comment."""
    rows = []
    for path in sorted((REPO / "configs").rglob("*.yaml")):
        comment = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            comment.append(line.lstrip("# "))
        rows.append([f"`{path.relative_to(REPO)}`", " ".join(comment) or "—"])
    return table(["file", "what it is"], rows)


def results_pages() -> str:
    """Every published results file (``benchmarks/results/**/*.md``) with its title, linked from the benchmarks
    index."""
    results = REPO / "benchmarks" / "results"
    rows = []
    for path in sorted(results.rglob("*.md")):
        name = path.relative_to(results)
        if "__" in str(name):
            continue
        title = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("# ")),
                     str(name))
        rows.append([f"[`{name}`](../results/{name})", title])
    return table(["file", "title"], rows)


GENERATORS: dict[str, Callable[..., str]] = {
    "backbones": backbones, "backbone-options": backbone_options, "attentions": attentions,
    "positions": positions, "learners": learners, "algo-options": algo_options, "run-settings": run_settings,
    "policy-options": policy_options, "option-rules": option_rules, "flags": flags, "env-families": env_families,
    "engram-tasks": engram_tasks, "configs": configs, "results": results_pages,
}


def render(name: str, arg: str | None = None) -> str:
    """The generated block ``name`` (with its argument, e.g. ``algo-options:ppo``)."""
    if name not in GENERATORS:
        raise KeyError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
    if name == "flags" and arg is not None:
        return flags("train_rl.py" if arg == "main" else f"train_rl.py {arg}")
    return GENERATORS[name](arg) if arg is not None else GENERATORS[name]()


def expand(markdown: str) -> str:
    """``markdown`` with every generated-block marker replaced by its block."""
    return MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown)


# --- mkdocs hook functions ------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)


ROLE_IN_HTML = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj):\s*<code>(~?)([^<]+)</code>")
LITERAL_MARKER = re.compile(r"(?<=[^\s:])::</p>")


def plain_roles(html: str) -> str:
    """Sphinx markup left in rendered docstrings, as plain HTML: a role (``:class:`~a.B``` reaches the page as
    ``:class:<code>~a.B</code>``) becomes ``<code>B</code>``, or the full name where it has no ``~``; a paragraph's
    closing ``::`` becomes ``:``."""
    html = ROLE_IN_HTML.sub(lambda m: f"<code>{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}</code>", html)
    return LITERAL_MARKER.sub(":</p>", html)  # reST's "text::" before a code block reads "text:"


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return plain_roles(html)


def on_files(files: Any, config: Any) -> Any:
    """Publish ``benchmarks/results/**/*.{md,png}`` (not the run directories' files) as ``results/...``."""
    from mkdocs.structure.files import File

    results = REPO / "benchmarks" / "results"
    for path in sorted(results.rglob("*")):
        if path.suffix in RESULT_SUFFIXES and "__" not in str(path.relative_to(results)):
            files.append(File(str(path.relative_to(REPO / "benchmarks")), src_dir=str(REPO / "benchmarks"),
                              dest_dir=config["site_dir"], use_directory_urls=config["use_directory_urls"]))
    return files
