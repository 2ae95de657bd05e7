"""The documentation cannot drift from the code: every path, module, setting and command
(with its subcommands and flags) the docs and the package maps name exists, every module
is named in its package's map, and the configuration reference is the settings' own."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from helpers import REPO

from memoryd.cli import main

PACKAGE = REPO / "memoryd"
#: What users read: the README, docs/, the benchmarks' guide, the annotated settings.
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
        REPO / "benchmarks" / "README.md", REPO / "config.example.yaml"]
#: A path inside the repository starts with one of its top-level entries.
TOP = tuple(sorted(p.name for p in REPO.iterdir() if not p.name.startswith((".git", "."))
                   or p.name == ".ci"))
_CODE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"^(?:\./)?([\w.-]+/[\w./<>*-]*|[\w-]+\.(?:py|md|yaml|toml|sh|service|plist))$")
_MODULE = re.compile(r"^memoryd(?:\.\w+)+$")
#: `memoryd.db`, `memoryd.sock`: files memoryd names after itself, not modules.
_FILE_NAMES = re.compile(r"^memoryd\.(?:\w+\.)?(?:db|sock|log|service|json|yaml|lock)$")
_COMMAND = re.compile(r"(?<![\w/.-])memoryd((?: +[^\s`;&|)(>]+(?:\|[^\s`;&)(>]+)*)*)")
_GLOBAL_FLAGS = {"--config", "-v", "--verbose", "--log-format", "--version", "-h", "--help"}


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def package_map(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8"))) or ""


def named_code(text: str) -> Iterator[str]:
    """Every `code span` of a text: what a reader takes for a name to look up."""
    for match in _CODE.finditer(text):
        yield match.group(1).strip()


def doc_texts() -> Iterator[tuple[str, str]]:
    for doc in DOCS:
        yield str(doc.relative_to(REPO)), doc.read_text("utf-8")


def _exists_in_repo(path: str, near: Path | None = None) -> bool:
    clean = path.rstrip("/").removeprefix("./")
    if any(char in clean for char in "<>*"):  # a pattern such as `memoryd/<agent>.py`
        prefix = re.split(r"[<>*]", clean, maxsplit=1)[0].rsplit("/", 1)[0]
        return (REPO / prefix).exists()
    return (REPO / clean).exists() or bool(near is not None and (near / clean).exists())


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for name, text in doc_texts():
        for code in named_code(text):
            match = _PATH.match(code)
            if match is None:
                continue
            path = match.group(1)
            if "/" not in path or not path.removeprefix("./").startswith(TOP):
                continue  # not a repository path: config.toml, ~/.claude/projects
            if not _exists_in_repo(path):
                missing.append(f"{name}: {code}")
    assert not missing, "\n".join(missing)


def _module_or_attribute(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except (ImportError, AttributeError):  # a parent that is a module, not a package
            continue
        target: object = importlib.import_module(module)
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_module_the_docs_name_exists() -> None:
    missing = [f"{name}: {code}" for name, text in doc_texts() for code in named_code(text)
               if _MODULE.match(code) and not _FILE_NAMES.match(code)
               and not _module_or_attribute(code)]
    assert not missing, "\n".join(missing)


def _command_words(line: str) -> Iterator[list[str]]:
    for match in _COMMAND.finditer(line):
        yield match.group(1).split()


def _options(command: click.Command) -> dict[str, bool]:
    """Each option of a command, and whether it takes a value."""
    return {opt: not (isinstance(param, click.Option) and (param.is_flag or param.count))
            for param in command.params if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)}


def _check_command(words: list[str]) -> str | None:
    """Why `memoryd WORDS...` names something that does not exist, or None."""
    context = click.Context(main)
    command: click.Command = main
    options = _options(main) | {"-h": False, "--help": False}
    arguments_started = skip_value = False
    for raw in words:
        word = raw.replace("\\", "").strip("[](),.:'\"")
        if skip_value:
            skip_value = False
            continue
        if not word or word in ("…", "...") or word.isupper():
            arguments_started = arguments_started or word.isupper()
            continue
        if word.startswith("-"):
            flag = re.match(r"--?[A-Za-z][\w-]*", word)
            if flag is None or command.context_settings.get("ignore_unknown_options"):
                continue
            if flag.group(0) not in options:
                return f"{command.name}: no option {flag.group(0)}"
            skip_value = options[flag.group(0)] and "=" not in word
            continue
        if isinstance(command, click.Group) and not arguments_started:
            found = [command.get_command(context, name) for name in word.split("|")]
            if all(found):
                command = found[0]  # type: ignore[assignment]
                options = _options(command) | {"-h": False, "--help": False}
                continue
            return f"{command.name}: no command {word}"
        arguments_started = True
    return None


def test_every_command_and_flag_the_docs_name_exists() -> None:
    wrong = []
    for name, text in doc_texts():
        for code in named_code(text):
            for words in _command_words(code):
                why = _check_command(words)
                if why:
                    wrong.append(f"{name}: `{code}`: {why}")
        for block in re.findall(r"```sh\n(.+?)```", text, flags=re.S):
            for line in block.splitlines():
                for words in _command_words(line.split("#", 1)[0]):
                    why = _check_command(words)
                    if why:
                        wrong.append(f"{name}: {line.strip()}: {why}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_is_in_its_package_map(package: Path) -> None:
    text = package_map(package)
    children = sorted(
        [f"{p.stem}.py" for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")]
        + [f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").exists()])
    if package == PACKAGE:
        children = [c for c in children if c.endswith("/")] + [c for c in children
                                                               if not c.endswith("/")]
    absent = [child for child in children if not re.search(
        rf"(?<![\w/]){re.escape(child.rstrip('/'))}{'/' if child.endswith('/') else ''}", text)]
    assert not absent, f"{package.relative_to(REPO)}/__init__.py does not name {absent}"


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_name_in_a_package_map_exists(package: Path) -> None:
    text = package_map(package)
    named = re.findall(r"(?<![\w/.`-])([a-z_][\w]*(?:\.py|/))(?=\s)", text)
    missing = [n for n in named if not _exists_in_repo(n, near=package)
               and not any(package.rglob(n.rstrip("/")))]
    assert not missing, f"{package.relative_to(REPO)}/__init__.py names {missing}"


def test_the_configuration_reference_is_generated_from_the_settings() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import config_reference
    finally:
        sys.path.remove(str(REPO / "scripts"))
    rendered = config_reference.render((REPO / "config.example.yaml").read_text("utf-8"))
    assert (REPO / "docs" / "configuration.md").read_text("utf-8") == rendered, (
        "docs/configuration.md is stale: python scripts/config_reference.py "
        "> docs/configuration.md")


def test_no_words_of_how_the_work_was_organised() -> None:
    words = re.compile(r"\b(sittings?|this stop|stop \d+|sessions? of work|the tree before)\b",
                       re.I)
    files = [*DOCS, REPO / "CHANGELOG.md"]
    found = [f"{f.relative_to(REPO)}: {m.group(0)}" for f in files
             for m in words.finditer(f.read_text("utf-8"))]
    assert not found, "\n".join(found)


def test_the_readme_is_a_front_page() -> None:
    """What memoryd is and how to start; everything else lives in docs/."""
    readme = (REPO / "README.md").read_text("utf-8")
    assert len(readme.encode()) <= 15_000
    for link in re.findall(r"\]\(([^)#]+)\)", readme):
        if not link.startswith("http"):
            assert (REPO / link).exists(), link


def test_every_link_between_the_docs_resolves() -> None:
    """A relative link in README.md, docs/ or the benchmarks' guide names a file that is
    there (its anchor aside)."""
    broken = []
    for doc in DOCS:
        if doc.suffix != ".md":
            continue
        for link in re.findall(r"\]\(([^)\s]+)\)", doc.read_text("utf-8")):
            target = link.split("#", 1)[0]
            if target and not re.match(r"^[a-z]+:", target) and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(REPO)}: {link}")
    assert not broken, "\n".join(broken)
