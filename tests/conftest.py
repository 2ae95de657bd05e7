"""Fixtures shared by every test directory; plain helpers live in helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import lay_out_fixtures


@pytest.fixture
def fixture_roots(tmp_path: Path) -> dict[str, Path]:
    """Every real fixture transcript laid out as the agents would write them."""
    return lay_out_fixtures(tmp_path / "agents")
