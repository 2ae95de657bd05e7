"""What the daemon's process tunes about itself (memoryd/process.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from memoryd import process


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("interval")
def test_the_switch_interval_is_shortened_never_lengthened() -> None:
    sys.setswitchinterval(0.005)
    process.tune_threads()
    assert sys.getswitchinterval() == pytest.approx(process.SWITCH_INTERVAL)
    assert process.SWITCH_INTERVAL < 0.005
    sys.setswitchinterval(process.SWITCH_INTERVAL / 4)
    process.tune_threads()
    assert sys.getswitchinterval() == pytest.approx(process.SWITCH_INTERVAL / 4)

