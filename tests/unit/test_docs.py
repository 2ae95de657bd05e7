"""The documentation keeps up with the code: every setting and every command is described."""

from __future__ import annotations

import re

import yaml
from click import Group
from helpers import REPO

from daemon.cli import main
from daemon.config import Settings, load_settings


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
    for name in main.commands:
        assert re.search(rf"`memoryd {name}\b", readme), name


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run calls the exact test command the README gives."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.+?)\n```", readme)
    assert len(blocks) >= 2
    assert blocks[1] in (REPO / ".ci" / "run").read_text()
