"""Any argument, any setting, through the real CLI: one line and a documented status, never a
traceback (issue 17.4). Each example runs `memoryd` as a process, so the counts are small;
the classes (numbers, time phrases, paths, text) are what the strategies cover."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from helpers import daemon_env, memoryd_command, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DOCUMENTED = {0, 1, 2, 65, 66, 69, 73, 74, 75, 78}

_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "0x10", "", " "]),
)
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=60)
_when = st.one_of(
    st.builds(lambda n, u: f"{n} {u} ago", st.integers(0, 10**15),
              st.sampled_from(["seconds", "minutes", "hours", "days", "weeks", "years"])),
    st.sampled_from(["yesterday", "today", "last week", "9999-99-99", "0001-01-01",
                     "10000-01-01", "2026-02-30T25:61"]),
    _text,
)
_command = st.one_of(
    st.tuples(st.just("show"), st.one_of(_numbers, _text)).map(list),
    st.tuples(st.just("sync"), _numbers).map(list),
    st.tuples(st.just("forget"), st.just("--session"), st.one_of(_numbers, _text)).map(list),
    st.tuples(st.just("sessions"), st.just("--since"), _when).map(list),
    st.tuples(st.just("recall"), _text, st.just("--limit"), _numbers).map(list),
    st.tuples(st.just("recall"), _text, st.just("--since"), _when).map(list),
    st.tuples(st.just("remember"), _text, st.just("--importance"), _numbers).map(list),
    st.tuples(st.just("context"), st.just("--budget"), _numbers).map(list),
    st.tuples(st.just("correct"), st.just("--query"), _text, _text).map(list),
    st.tuples(st.just("show"), st.just("x"), st.just("--offset"), _numbers).map(list),
)


def _run(tmp_path: Path, config: Path, args: list[str],
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memoryd_command("--config", str(config), *args),
                          env=env or daemon_env(tmp_path), capture_output=True, text=True,
                          timeout=60)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=_command)
def test_any_argument_gets_one_line_and_a_documented_status(tmp_path: Path,
                                                            args: list[str]) -> None:
    root = tmp_path / "claude"
    root.mkdir(exist_ok=True)
    config = write_config(tmp_path / "c.yaml", tmp_path / "state", {"claude": root})
    done = _run(tmp_path, config, ["--", *args] if args[0].startswith("-") else args)
    assert "Traceback" not in done.stderr, (args, done.stderr[-2000:])
    assert done.returncode in DOCUMENTED, (args, done.returncode, done.stderr[-500:])


_setting_value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20),
    _text, st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
    st.sampled_from(["2s", "30m", "1h30m", "-5s", "99999999999d", "0", "1e400"]),
)
_setting_name = st.sampled_from([
    "poll_interval", "shutdown_grace", "stale_session_timeout", "lifecycle_check_interval",
    "sync_delay", "sync_max_lag", "sync_check_interval", "segment_idle_gap",
    "segment_max_chars", "read_chunk_bytes", "log_level", "state_dir",
])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_setting_name, value=_setting_value)
def test_any_setting_is_accepted_or_refused_with_exit_78(tmp_path: Path, name: str,
                                                         value: object) -> None:
    root = tmp_path / "claude"
    root.mkdir(exist_ok=True)
    data = {"state_dir": str(tmp_path / "state"),
            "sources": [{"kind": "claude", "root": str(root)}], name: value}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = _run(tmp_path, config, ["status", "--json"])
    assert "Traceback" not in done.stderr, (name, value, done.stderr[-2000:])
    assert done.returncode in {0, 78}, (name, value, done.returncode, done.stderr[-500:])
    if done.returncode == 0:
        json.loads(done.stdout)
