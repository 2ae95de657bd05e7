"""Settings: durations, the YAML file, MEMORYD_* overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.config import DEFAULT_ROOTS, SourceKind, default_state_dir, load_settings
from memoryd.config_values import parse_duration
from memoryd.errors import ConfigError

pytestmark = pytest.mark.usefixtures("clean_environment")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("2s", 2.0), ("30m", 1800.0), ("1h", 3600.0), ("1h30m", 5400.0), ("250ms", 0.25),
        ("1d", 86400.0), (" 2S ", 2.0), ("1.5", 1.5), (5, 5.0), (0.5, 0.5), ("0", 0.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    """Durations accept seconds (numbers or numeric strings) and unit strings like 2s/30m/1h."""
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["2 weeks", "s", "1x", "", "-5", -1, True, None, [1]])
def test_bad_durations(value: object) -> None:
    """Anything else, negatives and booleans included, is refused with ValueError."""
    with pytest.raises(ValueError):
        parse_duration(value)


def test_defaults_work_with_no_file(clean_environment: Path) -> None:
    """With no config file and no environment, the defaults load and name the usual places."""
    settings = load_settings(None)
    assert settings.poll_interval == 2.0
    assert settings.state_dir == default_state_dir()
    assert settings.database_path == settings.state_dir / "memoryd.db"
    assert {s.kind: s.root for s in settings.sources} == {
        kind: Path(root).expanduser() for kind, root in DEFAULT_ROOTS.items()
    }
    assert all(s.enabled for s in settings.sources)


def test_yaml_file_is_read(clean_environment: Path) -> None:
    """Settings come from the YAML file: durations as strings, sources as a list."""
    config = _write(clean_environment / "c.yaml", (
        "state_dir: ~/state\n"
        "poll_interval: 30m\n"
        "sources:\n"
        "  - {kind: claude, root: /data/claude}\n"
        "  - {kind: codex, root: /data/codex, enabled: false}\n"
    ))
    settings = load_settings(config)
    assert settings.poll_interval == 1800.0
    assert settings.state_dir == clean_environment / "home" / "state"
    assert [(s.kind, str(s.root), s.enabled) for s in settings.sources] == [
        (SourceKind.CLAUDE, "/data/claude", True), (SourceKind.CODEX, "/data/codex", False)]
    assert [s.kind for s in settings.enabled_sources()] == [SourceKind.CLAUDE]


def test_default_config_path_is_read(clean_environment: Path) -> None:
    """Without --config or MEMORYD_CONFIG, $XDG_CONFIG_HOME/memoryd/config.yaml is read."""
    _write(clean_environment / "xdg-config" / "memoryd" / "config.yaml", "poll_interval: 7s\n")
    assert load_settings(None).poll_interval == 7.0


def test_memoryd_config_variable_names_the_file(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$MEMORYD_CONFIG names the file; it is not itself taken for a setting."""
    config = _write(clean_environment / "elsewhere.yaml", "poll_interval: 1h\n")
    monkeypatch.setenv("MEMORYD_CONFIG", str(config))
    assert load_settings(None).poll_interval == 3600.0


def test_environment_overrides_the_file(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MEMORYD_* variable wins over the same key in the YAML file."""
    config = _write(clean_environment / "c.yaml", "poll_interval: 30m\nlog_level: info\n")
    monkeypatch.setenv("MEMORYD_POLL_INTERVAL", "2s")
    monkeypatch.setenv("MEMORYD_LOG_LEVEL", "debug")
    settings = load_settings(config)
    assert settings.poll_interval == 2.0
    assert settings.log_level == "debug"


def test_unknown_key_in_file_names_the_key(clean_environment: Path) -> None:
    """An unknown key in the file raises ConfigError naming that key."""
    config = _write(clean_environment / "c.yaml", "poll_intervall: 2s\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert "poll_intervall" in str(caught.value)


def test_unknown_key_in_a_source_names_the_key(clean_environment: Path) -> None:
    """An unknown key nested in a source names its path."""
    config = _write(clean_environment / "c.yaml",
                    "sources:\n  - {kind: claude, root: /x, colour: red}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert "colour" in str(caught.value)


def test_unknown_environment_variable_names_it(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MEMORYD_* variable that is no setting raises ConfigError naming the variable."""
    monkeypatch.setenv("MEMORYD_POLL_INTERVALL", "2s")
    with pytest.raises(ConfigError) as caught:
        load_settings(None)
    assert "MEMORYD_POLL_INTERVALL" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("poll_interval: soon\n", "poll_interval"),
        ("poll_interval: -3\n", "poll_interval"),
        ("log_level: loud\n", "log_level"),
        ("read_chunk_bytes: 10\n", "read_chunk_bytes"),
        ("sources:\n  - {kind: vim, root: /x}\n", "kind"),
        ("sources: not-a-list\n", "sources"),
        ("memory:\n  embeddings:\n    vector_weight: 1.5\n", "vector_weight"),
    ],
)
def test_bad_value_names_the_key(clean_environment: Path, text: str, key: str) -> None:
    """A value of the wrong shape raises ConfigError naming the key."""
    config = _write(clean_environment / "c.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert key in str(caught.value)


def test_bad_environment_value_names_the_key(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad value from the environment is a ConfigError naming the setting."""
    monkeypatch.setenv("MEMORYD_POLL_INTERVAL", "whenever")
    with pytest.raises(ConfigError) as caught:
        load_settings(None)
    assert "poll_interval" in str(caught.value)


@pytest.mark.parametrize("text", ["poll_interval: [unclosed\n", "- just\n- a list\n"])
def test_file_that_is_not_a_mapping_is_refused(clean_environment: Path, text: str) -> None:
    """Invalid YAML, or YAML that is not a mapping, is a ConfigError naming the file."""
    config = _write(clean_environment / "c.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(config) in str(caught.value)


def test_explicit_missing_file_is_an_error(clean_environment: Path) -> None:
    """A config file named explicitly must exist."""
    with pytest.raises(ConfigError):
        load_settings(clean_environment / "absent.yaml")


def test_empty_file_gives_defaults(clean_environment: Path) -> None:
    """An empty YAML file is the same as no file."""
    config = _write(clean_environment / "c.yaml", "")
    assert load_settings(config).poll_interval == 2.0


def test_the_agent_list_is_one_list() -> None:
    """The agent type, the hook events, the default roots and the settings' source kinds
    all name the same agents (names.py is the one list)."""
    from typing import get_args

    from memoryd import names
    from memoryd.config import DEFAULT_ROOTS, SourceKind
    from memoryd.hooks.install import HOOK_EVENTS

    assert get_args(names.Agent) == names.AGENTS
    assert tuple(names.AGENT_EVENTS) == names.AGENTS == tuple(names.DEFAULT_ROOTS)
    assert tuple(k.value for k in SourceKind) == names.AGENTS
    assert {k.value for k in DEFAULT_ROOTS} == set(names.AGENTS) == set(HOOK_EVENTS)
    assert all(set(events.values()) <= set(names.EVENTS)
               for events in names.AGENT_EVENTS.values())
