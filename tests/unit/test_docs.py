"""The documentation keeps up with the code: every setting and every command is described."""

from __future__ import annotations

import re

import click
import yaml
from click import Group
from helpers import REPO

from memoryd.cli import main
from memoryd.config import Settings, load_settings


def test_example_config_names_every_setting_and_loads() -> None:
    """config.example.yaml holds every setting, and memoryd accepts it as it is."""
    example = REPO / "config.example.yaml"
    keys = set(yaml.safe_load(example.read_text()))
    assert keys == set(Settings.model_fields)
    load_settings(example)


def test_readme_documents_every_command() -> None:
    """Each `memoryd` command appears in the README's command table."""
    readme = (REPO / "README.md").read_text()
    assert isinstance(main, Group)
    names = main.list_commands(click.Context(main))
    assert "ingest" in names
    for name in names:
        assert re.search(rf"`memoryd {name}\b", readme), name


def test_every_command_is_found_where_the_group_looks_for_it() -> None:
    """The lazily loaded group's table names every command each module defines, and
    each command loads without the others."""
    import importlib

    from memoryd.cli.common import COMMAND_MODULES

    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"memoryd.cli.{module}")
    defined = {name: command.callback.__module__.rsplit(".", 1)[1]
               for name, command in main.commands.items() if command.callback}
    assert defined == COMMAND_MODULES


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls the exact test command the README gives."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.+?)\n```", readme)
    assert len(blocks) >= 2
    assert blocks[1] in (REPO / ".ci" / "run").read_text()


def test_the_recall_floor_default_is_the_gates() -> None:
    """The setting's default is the floor the benchmarks calibrated."""
    from memoryd.config_memory import EmbeddingSettings
    from memoryd.memory.recall.gate import MIN_SIMILARITY

    assert EmbeddingSettings().min_similarity == MIN_SIMILARITY
