"""Fixtures shared by every test directory; plain helpers live in helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import lay_out_fixtures
from hypothesis import settings

# CI explores the same examples every run, so a red build always reproduces;
# developers' runs explore new ones (HYPOTHESIS_PROFILE=dev is the default).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def fixture_roots(tmp_path: Path) -> dict[str, Path]:
    """Every real fixture transcript laid out as the agents would write them."""
    return lay_out_fixtures(tmp_path / "agents")
