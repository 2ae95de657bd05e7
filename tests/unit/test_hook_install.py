"""Installing hooks and the MCP server into agents' settings: merge, idempotence, exact removal."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.errors import SettingsFileError
from memoryd.hooks.codex import codex_hooks_feature
from memoryd.hooks.entries import ALLOW_RULES, is_memoryd_hook
from memoryd.hooks.install import HOOK_EVENTS, Installer, settings_path
from memoryd.hooks.script import GUARD, PACKAGED_CLIENT
from memoryd.names import AGENTS

MEMORYD = "/opt/memoryd/bin/memoryd"


def installer(root: Path) -> Installer:
    return Installer(memoryd=MEMORYD, socket=root / "state" / "memoryd.sock", hook_timeout=2.0,
                     home=root / "home", project=root / "project",
                     records=root / "state" / "integrations.json",
                     client=root / "state" / "hooks" / "memoryd-hook.sh")


def client_of(inst: Installer) -> str:
    """How a hook's command starts: the guard, then the hooks' own copy of the client."""
    return shlex.join(["/bin/sh", "-c", GUARD, "memoryd-hook", str(inst.client), MEMORYD])


_keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=12)
_handler = st.fixed_dictionaries({"type": st.just("command"),
                                   "command": st.sampled_from(["echo hi", "./lint.sh",
                                                               "memoryd-other run"])})
_group = st.fixed_dictionaries({"hooks": st.lists(_handler, min_size=1, max_size=2)},
                               optional={"matcher": st.sampled_from(["*", "startup", "x|y"])})
_hooks = st.dictionaries(st.sampled_from(["SessionStart", "Stop", "PreToolUse", "BeforeAgent",
                                          "UserPromptSubmit"]),
                         st.lists(_group, max_size=2), max_size=3)
_document = st.dictionaries(_keys.filter(lambda k: k not in ("hooks", "mcpServers")), _json,
                            max_size=4).flatmap(
    lambda base: st.fixed_dictionaries(
        {}, optional={"hooks": _hooks,
                      "mcpServers": st.dictionaries(st.sampled_from(["git", "web"]),
                                                    st.fixed_dictionaries(
                                                        {"command": st.just("x")}),
                                                    max_size=2)}
    ).map(lambda extra: {**base, **extra}))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=_document, agent=st.sampled_from(["claude", "gemini", "codex"]),
       indent=st.sampled_from([None, 2, 4, "\t"]), newline=st.booleans())
def test_install_then_uninstall_leaves_any_settings_document_unchanged(
        tmp_path_factory: pytest.TempPathFactory, document: dict[str, Any], agent: str,
        indent: int | str | None, newline: bool) -> None:
    """Any existing settings survive install then uninstall: the very same text."""
    root = tmp_path_factory.mktemp("agent")
    inst = installer(root)
    path = settings_path(agent, "hooks", "user", inst.home, inst.project)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    original = json.dumps(document, indent=indent) + ("\n" if newline else "")
    path.write_text(original, encoding="utf-8")
    inst.hooks(agent, "user", install=True, dry_run=False)  # type: ignore[arg-type]
    installed = json.loads(path.read_text())
    for event in HOOK_EVENTS[agent]:  # type: ignore[index]
        assert any(is_memoryd_hook(h["command"]) for g in installed["hooks"][event]
                   for h in g["hooks"])
    again = inst.hooks(agent, "user", install=True, dry_run=False)  # type: ignore[arg-type]
    assert not again.changed
    inst.hooks(agent, "user", install=False, dry_run=False)  # type: ignore[arg-type]
    assert path.read_text() == original


def test_install_creates_and_uninstall_deletes_a_missing_file(tmp_path: Path) -> None:
    """A settings file install had to create is gone after uninstall; nothing else is left."""
    inst = installer(tmp_path)
    for agent in AGENTS:
        for what in ("hooks", "mcp"):
            path = settings_path(agent, what, "user", inst.home, inst.project)
            method = inst.hooks if what == "hooks" else inst.mcp
            assert method(agent, "user", install=True, dry_run=False).changed
            assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
            method(agent, "user", install=False, dry_run=False)
    leftovers = [p for p in (tmp_path / "home").rglob("*")
                 if p.is_file() and not p.name.endswith(".memoryd-backup")]
    assert leftovers == []


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    """--dry-run reports the new text but writes no file."""
    inst = installer(tmp_path)
    change = inst.hooks("claude", "user", install=True, dry_run=True)
    assert change.changed and change.after is not None and "SessionStart" in change.after
    assert not change.path.exists()


def test_unparsable_settings_are_refused_untouched(tmp_path: Path) -> None:
    """A settings file that is not JSON is never rewritten; the error names it."""
    inst = installer(tmp_path)
    path = settings_path("claude", "hooks", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    path.write_text('{"hooks": {,}}')
    with pytest.raises(SettingsFileError, match="not valid JSON"):
        inst.hooks("claude", "user", install=True, dry_run=False)
    assert path.read_text() == '{"hooks": {,}}'
    assert not path.with_name("settings.json.memoryd-backup").exists()


def test_install_keeps_a_backup_of_the_previous_file(tmp_path: Path) -> None:
    """The file as it was before install is kept beside it."""
    inst = installer(tmp_path)
    path = settings_path("gemini", "hooks", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    path.write_text('{"theme": "dark"}')
    inst.hooks("gemini", "user", install=True, dry_run=False)
    assert path.with_name("settings.json.memoryd-backup").read_text() == '{"theme": "dark"}'


def test_the_backup_is_the_persons_file_not_one_memoryd_wrote(tmp_path: Path) -> None:
    """Issue 32.14: `hooks install --agent codex` then `mcp install --agent codex` both
    write Codex's config.toml; the backup still holds the person's original, and a file
    the person edited afterwards is what the next backup keeps."""
    inst = installer(tmp_path)
    config = inst.home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    original = 'model = "o4-mini"\n'
    config.write_text(original)
    backup = config.with_name("config.toml.memoryd-backup")
    inst.codex_feature("user", install=True, dry_run=False)
    assert backup.read_text() == original
    inst.mcp("codex", "user", install=True, dry_run=False)
    assert config.read_text() != original and backup.read_text() == original
    edited = config.read_text() + 'approval_policy = "never"\n'
    config.write_text(edited)
    inst.mcp("codex", "user", install=False, dry_run=False)
    assert backup.read_text() == edited


def test_hook_commands_are_absolute_and_in_each_agents_units(tmp_path: Path) -> None:
    """Hooks run the shell client by absolute paths, handing it memoryd's absolute path;
    Gemini's timeouts are milliseconds."""
    inst = installer(tmp_path)
    for agent in AGENTS:
        inst.hooks(agent, "user", install=True, dry_run=False)
    claude = json.loads(settings_path("claude", "hooks", "user", inst.home,
                                      inst.project).read_text())
    handler = claude["hooks"]["UserPromptSubmit"][0]["hooks"][0]
    assert handler["command"].startswith(f"{client_of(inst)} hook --agent claude")
    assert inst.client.is_absolute() and inst.client.read_bytes() == PACKAGED_CLIENT.read_bytes()
    assert handler["command"].endswith("UserPromptSubmit") and handler["timeout"] == 10
    gemini = json.loads(settings_path("gemini", "hooks", "user", inst.home,
                                      inst.project).read_text())
    assert gemini["hooks"]["BeforeAgent"][0]["hooks"][0]["timeout"] == 10_000
    codex = json.loads(settings_path("codex", "hooks", "user", inst.home,
                                     inst.project).read_text())
    assert set(codex["hooks"]) == set(HOOK_EVENTS["codex"])


def test_codex_config_toml_keeps_comments_and_other_servers(tmp_path: Path) -> None:
    """The MCP table is merged into config.toml with comments and other tables intact."""
    inst = installer(tmp_path)
    path = settings_path("codex", "mcp", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    original = ('# my codex settings\nmodel = "o4"  # keep\n\n'
                '[mcp_servers.git]\ncommand = "git-mcp"\n')
    path.write_text(original)
    inst.mcp("codex", "user", install=True, dry_run=False)
    document = tomlkit.parse(path.read_text())
    assert document["mcp_servers"]["memoryd"]["command"] == MEMORYD  # type: ignore[index]
    assert "# my codex settings" in path.read_text() and "# keep" in path.read_text()
    assert not inst.mcp("codex", "user", install=True, dry_run=False).changed
    inst.mcp("codex", "user", install=False, dry_run=False)
    assert path.read_text() == original


def test_mcp_entries_per_agent(tmp_path: Path) -> None:
    """Claude's project scope writes .mcp.json; Gemini's settings get an mcpServers entry."""
    inst = installer(tmp_path)
    inst.mcp("claude", "project", install=True, dry_run=False)
    entry = json.loads((tmp_path / "project" / ".mcp.json").read_text())["mcpServers"]["memoryd"]
    assert entry == {"type": "stdio", "command": MEMORYD, "args": ["mcp", "--agent", "claude"],
                     "env": {}}
    inst.mcp("gemini", "user", install=True, dry_run=False)
    status = inst.status("gemini", "user")
    assert status["mcp"] is True and status["hooks"] == []


def test_settings_kept_as_a_symlink_stay_one(tmp_path: Path) -> None:
    """A settings file that links into a dotfiles repository is updated where it lives."""
    inst = installer(tmp_path)
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text('{"theme": "dark"}\n')
    path = settings_path("claude", "hooks", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    path.symlink_to(real)
    inst.hooks("claude", "user", install=True, dry_run=False)
    assert path.is_symlink() and "SessionStart" in real.read_text()
    inst.hooks("claude", "user", install=False, dry_run=False)
    assert path.is_symlink() and real.read_text() == '{"theme": "dark"}\n'


@pytest.mark.parametrize("text", ['mcp_servers = "x"\n', "mcp_servers = { a = 1 }\n"])
def test_codex_config_of_an_unexpected_shape_is_refused(tmp_path: Path, text: str) -> None:
    """A config.toml whose mcp_servers is not a table is refused with a clear error."""
    inst = installer(tmp_path)
    path = settings_path("codex", "mcp", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(SettingsFileError, match="mcp_servers"):
        inst.mcp("codex", "user", install=True, dry_run=False)
    assert path.read_text() == text


def test_config_file_is_passed_to_hooks_and_the_server(tmp_path: Path) -> None:
    """Installed with --config, hooks and the MCP server use that settings file too."""
    inst = Installer(memoryd=MEMORYD, socket=tmp_path / "s.sock", hook_timeout=2.0,
                     home=tmp_path / "home", project=tmp_path / "project",
                     records=tmp_path / "state" / "integrations.json",
                     client=tmp_path / "state" / "hooks" / "memoryd-hook.sh",
                     config="/etc/memoryd.yaml")
    inst.hooks("claude", "user", install=True, dry_run=False)
    inst.mcp("gemini", "user", install=True, dry_run=False)
    claude = json.loads(settings_path("claude", "hooks", "user", inst.home,
                                      inst.project).read_text())
    assert "--config /etc/memoryd.yaml" in claude["hooks"]["Stop"][0]["hooks"][0]["command"]
    gemini = json.loads(settings_path("gemini", "mcp", "user", inst.home,
                                      inst.project).read_text())
    assert gemini["mcpServers"]["memoryd"]["args"] == ["--config", "/etc/memoryd.yaml", "mcp",
                                                       "--agent", "gemini"]


def test_codex_hooks_feature_flag_is_set_and_removed_exactly(tmp_path: Path) -> None:
    """`[features] hooks = true` is added when unset and removed by uninstall only."""
    inst = installer(tmp_path)
    path = settings_path("codex", "mcp", "user", inst.home, inst.project)
    assert inst.codex_feature("user", install=True, dry_run=False).changed
    assert tomlkit.parse(path.read_text())["features"]["hooks"] is True  # type: ignore[index]
    assert not inst.codex_feature("user", install=True, dry_run=False).changed
    inst.codex_feature("user", install=False, dry_run=False)
    assert not path.exists()

    original = '# mine\n[features]\nweb_search = true  # keep\n\n[tui]\ntheme = "x"\n'
    path.write_text(original)
    inst.codex_feature("user", install=True, dry_run=False)
    assert "hooks = true" in path.read_text() and "# keep" in path.read_text()
    inst.codex_feature("user", install=False, dry_run=False)
    assert path.read_text() == original


def test_a_codex_with_hooks_on_by_default_gets_no_key_and_loses_an_older_installs(
        tmp_path: Path) -> None:
    """Issue 32.9: Codex 0.169 warns on every run that `codex_hooks` is deprecated. For a
    Codex whose hooks are on by default no key is written, and the one an earlier memoryd
    install wrote is taken back (the person's file as it was)."""
    inst = installer(tmp_path)
    path = settings_path("codex", "mcp", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    original = 'model = "gpt-5"\n'
    path.write_text(original)
    assert not inst.codex_feature("user", install=True, dry_run=False, key=None).changed
    assert path.read_text() == original
    inst.codex_feature("user", install=True, dry_run=False, key="codex_hooks")
    assert "codex_hooks = true" in path.read_text()
    assert inst.codex_feature("user", install=True, dry_run=False, key=None).changed
    assert path.read_text() == original
    inst.codex_feature("user", install=True, dry_run=False, key="codex_hooks")
    inst.codex_feature("user", install=True, dry_run=False, key="hooks")
    assert "codex_hooks" not in path.read_text() and "hooks = true" in path.read_text()
    inst.codex_feature("user", install=False, dry_run=False)
    assert path.read_text() == original


def test_the_hooks_key_is_the_one_the_installed_codex_lists(tmp_path: Path) -> None:
    """`codex features list` of the installed Codex decides (a stand-in executable)."""
    codex = tmp_path / "codex"

    def lists(text: str) -> str | None:
        codex.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}EOF\n")
        codex.chmod(0o755)
        return codex_hooks_feature(str(codex))

    assert lists("apps   stable  true\nhooks   stable   true\n") is None
    assert lists("hooks   experimental   false\n") == "hooks"
    assert lists("codex_hooks   experimental   false\n") == "codex_hooks"
    assert lists("") == "hooks"
    assert codex_hooks_feature(None) == "hooks"
    assert codex_hooks_feature(str(tmp_path / "missing")) == "hooks"


def test_codex_hooks_turned_off_by_the_user_stay_off(tmp_path: Path) -> None:
    """A user's own `hooks = false` is left alone, and said."""
    inst = installer(tmp_path)
    path = settings_path("codex", "mcp", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    path.write_text("[features]\nhooks = false\n")
    change = inst.codex_feature("user", install=True, dry_run=False)
    assert not change.changed and "turned off" in change.note
    assert path.read_text() == "[features]\nhooks = false\n"


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_uninstall_leaves_every_file_as_it_was_before_memoryd(tmp_path: Path,
                                                             agent: str) -> None:
    """Issue 36.12: hooks and the MCP server installed then uninstalled leave no file
    memoryd created (no `{}` settings.json, no empty config.toml) and no backup; a file
    the person had is byte for byte what it was."""
    inst = installer(tmp_path)

    def files() -> dict[str, str]:
        return {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*")
                if p.is_file() and "state" not in p.parts}

    for steps in ((True, True), (False, False)):
        for install in steps:
            inst.hooks(agent, "user", install=install, dry_run=False)  # type: ignore[arg-type]
            if agent == "codex":
                inst.codex_feature("user", install=install, dry_run=False)
            inst.mcp(agent, "user", install=install, dry_run=False)  # type: ignore[arg-type]
            if install:
                assert files(), "install wrote nothing"
    assert files() == {}
    own = settings_path(agent, "mcp", "user", inst.home, inst.project)  # type: ignore[arg-type]
    own.parent.mkdir(parents=True, exist_ok=True)
    mine = '# mine\nmodel = "o4-mini"\n' if own.suffix == ".toml" else '{"theme": "dark"}\n'
    own.write_text(mine)
    before = files()
    inst.hooks(agent, "user", install=True, dry_run=False)  # type: ignore[arg-type]
    inst.mcp(agent, "user", install=True, dry_run=False)  # type: ignore[arg-type]
    inst.mcp(agent, "user", install=False, dry_run=False)  # type: ignore[arg-type]
    inst.hooks(agent, "user", install=False, dry_run=False)  # type: ignore[arg-type]
    assert files() == before


def test_mcp_install_makes_the_tools_usable_where_each_agent_allows_it(tmp_path: Path) -> None:
    """Issue 32.4, 32.5: Codex waits for a required server; Gemini trusts the server (it
    cannot trust some tools only), and install says so."""
    inst = installer(tmp_path)
    inst.mcp("codex", "user", install=True, dry_run=False)
    codex = tomlkit.parse((inst.home / ".codex" / "config.toml").read_text())
    assert codex["mcp_servers"]["memoryd"]["required"] is True  # type: ignore[index]
    change = inst.mcp("gemini", "user", install=True, dry_run=False)
    gemini = json.loads(settings_path("gemini", "mcp", "user", inst.home,
                                      inst.project).read_text())
    assert gemini["mcpServers"]["memoryd"]["trust"] is True
    assert "trust: true" in change.note


def test_codex_hooks_are_reported_untrusted_until_codex_records_their_trust(
        tmp_path: Path) -> None:
    """`hooks status` said Codex's hooks worked before the person had trusted them in Codex,
    which runs none of them until then (issue 32, also seen)."""
    inst = installer(tmp_path)
    inst.hooks("codex", "user", install=True, dry_run=False)
    hooks_path = settings_path("codex", "hooks", "user", inst.home, inst.project)
    report = inst.status("codex", "user")
    assert report["untrusted"] == sorted(HOOK_EVENTS["codex"])
    config = settings_path("codex", "mcp", "user", inst.home, inst.project)
    config.parent.mkdir(parents=True, exist_ok=True)
    snake = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit",
             "PreCompact": "pre_compact", "PostCompact": "post_compact",
             "SessionEnd": "session_end", "Stop": "stop"}
    trusted = [event for event in HOOK_EVENTS["codex"] if event != "Stop"]
    config.write_text("".join(
        f'[hooks.state."{hooks_path}:{snake[event]}:0:0"]\ntrusted_hash = "sha256:ab"\n\n'
        for event in trusted))
    assert inst.status("codex", "user")["untrusted"] == ["Stop"]


def test_claude_may_run_the_read_only_tools_and_uninstall_takes_back_only_those(
        tmp_path: Path) -> None:
    """Issue 32.5: `claude -p` refused memoryd's recall ("you haven't granted it yet").
    Install allows the read-only tools; a person's own rules, and one of memoryd's they
    had allowed themselves, stay through uninstall; the file ends as it began."""
    inst = installer(tmp_path)
    path = settings_path("claude", "hooks", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    original = json.dumps({"permissions": {"allow": ["Bash(ls:*)",
                                                     "mcp__memoryd__recall"]}}, indent=1)
    path.write_text(original)
    inst.hooks("claude", "user", install=True, dry_run=False)
    assert inst.claude_allow("user", install=True, dry_run=False).changed
    allow = json.loads(path.read_text())["permissions"]["allow"]
    assert set(ALLOW_RULES) <= set(allow) and "Bash(ls:*)" in allow
    assert not {"mcp__memoryd__remember", "mcp__memoryd__forget_memory",
                "mcp__memoryd__correct_memory"} & set(allow)
    assert not inst.claude_allow("user", install=True, dry_run=False).changed
    inst.claude_allow("user", install=False, dry_run=False)
    assert json.loads(path.read_text())["permissions"]["allow"] == [
        "Bash(ls:*)", "mcp__memoryd__recall"]
    inst.hooks("claude", "user", install=False, dry_run=False)
    assert path.read_text() == original


def test_the_allowed_tools_are_the_servers_read_only_ones(tmp_path: Path) -> None:
    from memoryd.mcp_server import build_server

    server = build_server(None, project_dir="/p")  # type: ignore[arg-type]
    listed = asyncio.run(server.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
    assert listed is not None
    read_only = {tool["name"] for tool in listed["result"]["tools"]
                 if tool["annotations"]["readOnlyHint"]}
    assert {f"mcp__memoryd__{name}" for name in read_only} == set(ALLOW_RULES)


def test_an_earlier_installs_python_hook_is_replaced_not_doubled(tmp_path: Path) -> None:
    """Installs before the shell client wrote `memoryd hook ...` itself: installing again
    replaces each such entry with the shell client's, and keeps the person's own hooks."""
    inst = installer(tmp_path)
    path = settings_path("claude", "hooks", "user", inst.home, inst.project)
    path.parent.mkdir(parents=True)
    old = f"{MEMORYD} hook --agent claude --socket /old/memoryd.sock --timeout 2 SessionStart"
    mine = {"type": "command", "command": "echo mine"}
    path.write_text(json.dumps({"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": old}]}, {"hooks": [mine]}]}}))
    assert is_memoryd_hook(old)
    inst.hooks("claude", "user", install=True, dry_run=False)
    groups = json.loads(path.read_text())["hooks"]["SessionStart"]
    commands = [h["command"] for g in groups for h in g["hooks"]]
    assert "echo mine" in commands and old not in commands
    ours = [c for c in commands if is_memoryd_hook(c)]
    assert len(ours) == 1 and ours[0].startswith(f"{client_of(inst)} hook")
    inst.hooks("claude", "user", install=False, dry_run=False)
    remaining = json.loads(path.read_text())["hooks"]["SessionStart"]
    assert [h["command"] for g in remaining for h in g["hooks"]] == ["echo mine"]
