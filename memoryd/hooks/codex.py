"""Codex's own settings: memoryd's table in config.toml (comments kept, through tomlkit),
the `[features]` key its hooks need, and which of memoryd's hooks it has not trusted yet."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from memoryd.errors import SettingsFileError
from memoryd.hooks.entries import SERVER_NAME, is_memoryd_hook
from memoryd.names import Agent

#: The `[features]` keys that have turned Codex's hooks on: the current one, then the
#: name Codex builds before it used (newer ones warn that it is deprecated).
CODEX_FEATURES = ("hooks", "codex_hooks")
LEGACY_CODEX_FEATURE = "codex_hooks"


# -- TOML (Codex's config.toml) ----------------------------------------------------------

def parse_toml(text: str | None, path: Path) -> Any:
    """Codex's config.toml as a tomlkit document (comments kept); refused if it does not parse."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text or "")
    except TOMLKitError as exc:
        raise SettingsFileError(f"{path}: not valid TOML ({exc}); memoryd will not rewrite"
                                " a file it cannot parse") from None


def codex_server(text: str | None, entry: dict[str, Any] | None, path: Path) -> str:
    import tomlkit

    document = parse_toml(text, path)
    servers = document.get("mcp_servers")
    if servers is not None and not isinstance(servers, dict):
        raise SettingsFileError(f"{path}: its mcp_servers is not a table; memoryd will not"
                                " rewrite it")
    if entry is None:
        if servers is not None and SERVER_NAME in servers:
            del servers[SERVER_NAME]
            if not servers:
                del document["mcp_servers"]
        # tomlkit leaves the blank line that separated the removed table.
        left = tomlkit.dumps(document)
        return left.rstrip("\n") + "\n" if left.strip() else ""
    table = tomlkit.table()
    for key, value in entry.items():
        table[key] = value
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        document["mcp_servers"] = servers
    elif not hasattr(servers, "append") or isinstance(servers, tomlkit.items.InlineTable):
        raise SettingsFileError(f"{path}: its mcp_servers is an inline table; add memoryd"
                                " by hand")
    servers[SERVER_NAME] = table
    return tomlkit.dumps(document)


def same_toml(a: str, b: str) -> bool:
    import tomllib

    try:
        return tomllib.loads(a) == tomllib.loads(b)
    except tomllib.TOMLDecodeError:
        return False


def codex_untrusted(hooks_path: Path, hooks: dict[str, Any], config: Path) -> list[str]:
    """memoryd's Codex hooks that Codex will not run yet: no `trusted_hash` for them under
    `[hooks.state]` in its config.toml (Codex writes one when the person approves a hook
    in `/hooks`). Whether a recorded hash still matches only Codex can tell."""
    import tomlkit

    try:
        document = tomlkit.parse(config.read_text(encoding="utf-8")) if config.exists() else {}
    except Exception:
        document = {}
    state = document.get("hooks", {}).get("state", {}) if isinstance(
        document.get("hooks"), dict) else {}
    untrusted = []
    source = os.path.abspath(hooks_path)
    for event, groups in hooks.items():
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in event).lstrip("_")
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h, handler in enumerate(handlers if isinstance(handlers, list) else []):
                if not (isinstance(handler, dict) and is_memoryd_hook(handler.get("command"))):
                    continue
                entry = state.get(f"{source}:{snake}:{g}:{h}") if isinstance(
                    state, dict) else None
                if not (isinstance(entry, dict) and entry.get("trusted_hash")):
                    untrusted.append(event)
    return sorted(set(untrusted))


def codex_hooks_feature(codex: str | None) -> str | None:
    """The `[features]` key the installed Codex needs for hooks, from its own
    `codex features list`: None when hooks are on by default (a key would only draw a
    deprecation warning), the current key when Codex cannot be asked."""
    if codex is None:
        return CODEX_FEATURES[0]
    try:
        listed = subprocess.run([codex, "features", "list"], capture_output=True,
                                text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return CODEX_FEATURES[0]
    rows = {parts[0]: parts[1:] for line in listed.stdout.splitlines()
            if (parts := line.split())}
    if "hooks" in rows:
        return None if rows["hooks"][-1:] == ["true"] else "hooks"
    return LEGACY_CODEX_FEATURE if LEGACY_CODEX_FEATURE in rows else CODEX_FEATURES[0]


def codex_note(agent: Agent) -> str:
    if agent != "codex":
        return ""
    return "Codex runs new hooks only once you approve them: open `/hooks` in Codex once"
