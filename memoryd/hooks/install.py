"""Putting memoryd's hooks and MCP server into an agent's settings, and taking them out.

Rules, for every agent and file:

- Merge, never overwrite: only memoryd's own entries are added; other hooks,
  other servers, unknown keys and key order stay as they were (TOML comments
  too, through tomlkit).
- Idempotent: installing twice changes nothing.
- `uninstall` removes exactly what `install` added: memoryd's entries, and the
  containers (`hooks`, an event's list, `mcpServers`) that install created,
  which it records in `<state_dir>/integrations.json`.
- Atomic, with a backup: the old file is copied to `<file>.memoryd-backup`,
  the new one written to a temporary file and renamed over it.
- A file that does not parse is refused with one clear line, never rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memoryd.config import Settings
from memoryd.errors import SettingsFileError
from memoryd.files import atomic_write, make_dirs
from memoryd.hooks.codex import (
    CODEX_FEATURES,
    codex_note,
    codex_server,
    codex_untrusted,
    parse_toml,
    same_toml,
)
from memoryd.hooks.entries import (
    FILE,
    SERVER_NAME,
    Record,
    dump_json,
    load_json,
    merge_allow,
    merge_hooks,
    merge_server,
    note_created,
    same_json,
    unmerge_allow,
    unmerge_hooks,
    unmerge_server,
)
from memoryd.hooks.script import (
    hook_command,
    parse_command,
    problems,
    refresh_client,
    stable_client,
)
from memoryd.names import AGENT_EVENTS, AGENTS, Agent

Scope = Literal["user", "project"]


HOOK_EVENTS: dict[Agent, tuple[str, ...]] = {agent: tuple(AGENT_EVENTS[agent])
                                             for agent in AGENTS}


@dataclass(frozen=True, slots=True)
class Change:
    """What install or uninstall did, or would do with --dry-run, to one file."""

    agent: Agent
    what: str  # "hooks" or "mcp"
    path: Path
    before: str | None  # None: the file did not exist
    after: str | None  # None: the file is to be left as it was
    note: str = ""
    #: Uninstall removes a file that install created and that holds nothing else now.
    delete: bool = False

    @property
    def changed(self) -> bool:
        return self.delete or (self.after is not None and self.after != self.before)



def settings_path(agent: Agent, what: str, scope: Scope, home: Path, project: Path) -> Path:
    """Where each agent keeps hooks and MCP servers, per scope."""
    base = home if scope == "user" else project
    if agent == "claude":
        if what == "hooks":
            return base / ".claude" / "settings.json"
        return home / ".claude.json" if scope == "user" else project / ".mcp.json"
    if agent == "codex":
        return base / ".codex" / ("hooks.json" if what == "hooks" else "config.toml")
    return base / ".gemini" / "settings.json"

# -- files -------------------------------------------------------------------------------

def write_atomically(path: Path, text: str, *, backup: bool = True) -> None:
    """Replace `path` by `text`, keeping (with `backup`) a copy of the old file, and its mode.

    A settings file that is a symlink (dotfiles kept in a repository) stays one:
    the file it points to is replaced."""
    path = Path(os.path.realpath(path))
    make_dirs(path.parent)
    mode = 0o600
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if backup:
            shutil.copy2(path, _backup_of(path))
    atomic_write(path, text, mode=mode)


def _holds_nothing(path: Path) -> bool:
    """An empty settings file: blank, or a JSON object with no keys."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if not text.strip():
        return True
    try:
        return bool(json.loads(text) == {})
    except ValueError:
        return False


def _backup_of(path: Path) -> Path:
    return path.with_name(path.name + ".memoryd-backup")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def installer_for(settings: Settings, *, memoryd: str, home: Path, project: Path,
                  config: str | None) -> Installer:
    """The installer for these settings (`memoryd` the executable hooks run)."""
    return Installer(memoryd=memoryd, socket=settings.socket_path,
                     hook_timeout=settings.agents.hook_timeout, home=home, project=project,
                     records=settings.state_dir / "integrations.json",
                     client=stable_client(settings.state_dir), config=config)


class Installer:
    """Install, uninstall and inspect memoryd's entries for each agent."""

    def __init__(self, *, memoryd: str, socket: Path, hook_timeout: float, home: Path,
                 project: Path, records: Path, client: Path,
                 config: str | None = None) -> None:
        self.memoryd = memoryd
        #: The hooks' own copy of the shell client (`hooks.client`).
        self.client = client
        #: The settings file memoryd was told to use, passed on to hooks and the server.
        self.config = config
        self.socket = socket
        self.hook_timeout = hook_timeout
        self.home = home
        self.project = project
        self._records_path = records

    def _records(self) -> dict[str, Any]:
        try:
            data = json.loads(self._records_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _record_for(self, path: Path, what: str) -> Record:
        entry = self._records().get(f"{what}:{path}")
        if not isinstance(entry, dict):
            return Record()
        original = entry.get("original")
        return Record(created=[list(c) for c in entry.get("created", [])], present=True,
                      original=original if isinstance(original, str) else None)

    def _fresh_record(self, path: Path, what: str, before: str | None) -> Record:
        """The record of an install: the earlier install's, else what the file was."""
        record = self._record_for(path, what)
        if record.present:
            return record
        return Record(present=True, original=before)

    def _ours(self, path: Path, before: str | None) -> bool:
        """Whether `path` still holds what memoryd last wrote there (and its backup is
        there): then the backup already holds the person's own file."""
        written = self._records().get(f"written:{os.path.realpath(path)}")
        return (before is not None and isinstance(written, dict)
                and written.get("sha256") == _digest(before)
                and _backup_of(Path(os.path.realpath(path))).exists())

    def _remember_written(self, path: Path, text: str | None) -> None:
        records = self._records()
        key = f"written:{os.path.realpath(path)}"
        if text is None:
            records.pop(key, None)
        else:
            records[key] = {"sha256": _digest(text)}
        make_dirs(self._records_path.parent)
        write_atomically(self._records_path, json.dumps(records, indent=2) + "\n",
                         backup=False)

    def _save_record(self, path: Path, what: str, record: Record | None) -> None:
        records = self._records()
        key = f"{what}:{path}"
        if record is None:
            records.pop(key, None)
        else:
            records[key] = {"created": record.created, "original": record.original}
        make_dirs(self._records_path.parent)
        write_atomically(self._records_path, json.dumps(records, indent=2) + "\n",
                         backup=False)
        if record is None:
            self._tidy(path)

    def hooks(self, agent: Agent, scope: Scope, *, install: bool, dry_run: bool) -> Change:
        path = settings_path(agent, "hooks", scope, self.home, self.project)
        before, document = load_json(path)
        record = self._record_for(path, "hooks")
        if install:
            if not dry_run:
                refresh_client(self.client)
            commands = {event: hook_command(self.client, self.memoryd, agent, event,
                                            self.socket, self.hook_timeout, self.config)
                        for event in HOOK_EVENTS[agent]}
            fresh: Record | None = self._fresh_record(path, "hooks", before)
            assert fresh is not None
            after_doc = merge_hooks(document, agent, commands, fresh)
        else:
            fresh = None
            after_doc = unmerge_hooks(document, record)
        return self._apply(agent, "hooks", path, before, document, after_doc, fresh, dry_run,
                           codex_note(agent) if install else "", record)

    def codex_feature(self, scope: Scope, *, install: bool, dry_run: bool,
                      key: str | None = CODEX_FEATURES[0]) -> Change:
        """The `[features]` key that turns hooks on in Codex's config.toml, for Codex builds
        that need one (`key`, from `codex_hooks_feature`: None when the installed Codex has
        hooks on by default). Set only when the person set neither key; removed only if
        install set it, and an older install's key is taken back when it is not needed."""
        import tomlkit

        path = settings_path("codex", "mcp", scope, self.home, self.project)
        before = path.read_text(encoding="utf-8") if path.exists() else None
        record = self._record_for(path, "feature")
        document = parse_toml(before, path)
        features = document.get("features")
        if features is not None and not isinstance(features, dict):
            raise SettingsFileError(f"{path}: its features is not a table")
        ours = [name for name in CODEX_FEATURES
                if record.present and features is not None and name in features]
        if install and not (ours and ours != [key]):
            theirs = [features.get(n) for n in CODEX_FEATURES if features and n in features]
            if theirs:
                enabled = bool(ours) or any(theirs)
                note = "" if enabled else (f"hooks are turned off in {path} ([features]);"
                                           " memoryd leaves that as it is")
                return Change("codex", "feature", path, before, None, note)
            if key is None:
                return Change("codex", "feature", path, before, None)
            created = self._fresh_record(path, "feature", before)
            if features is None:
                features = tomlkit.table()
                document["features"] = features
                note_created(created, ["features"])
            features[key] = True
            if before is None:
                note_created(created, [FILE])
            change = self._write(Change("codex", "feature", path, before,
                                        tomlkit.dumps(document)), dry_run)
            if change.changed and not dry_run:
                self._save_record(path, "feature", created)
            return change
        if not ours:
            return Change("codex", "feature", path, before, None)
        assert features is not None
        for name in ours:
            del features[name]
        if install and key is not None:
            features[key] = True  # an older install's key, renamed for this Codex
        if not features and ["features"] in record.created:
            del document["features"]
        after = tomlkit.dumps(document)
        after = after.rstrip("\n") + "\n" if after.strip() else ""
        if record.original is not None and same_toml(record.original, after):
            after = record.original
        delete = not after.strip() and [FILE] in record.created
        change = self._write(Change("codex", "feature", path, before, after, delete=delete),
                             dry_run)
        if not dry_run and not (install and key is not None):
            self._save_record(path, "feature", None)
        return change

    def claude_allow(self, scope: Scope, *, install: bool, dry_run: bool) -> Change:
        """Claude Code's allow rules for memoryd's read-only tools, in its settings.json."""
        path = settings_path("claude", "hooks", scope, self.home, self.project)
        before, document = load_json(path)
        record = self._record_for(path, "allow")
        if install:
            fresh: Record | None = self._fresh_record(path, "allow", before)
            assert fresh is not None
            after_doc = merge_allow(document, fresh)
        else:
            fresh = None
            after_doc = unmerge_allow(document, record)
        note = ("Claude Code runs memoryd's read-only tools (recall, search) without asking;"
                " remember, correct and forget still ask" if install else "")
        return self._apply("claude", "allow", path, before, document, after_doc, fresh,
                           dry_run, note, record)

    def mcp(self, agent: Agent, scope: Scope, *, install: bool, dry_run: bool) -> Change:
        path = settings_path(agent, "mcp", scope, self.home, self.project)
        # The server knows its agent: that agent's private memories are its alone.
        args = (["--config", self.config] if self.config else []) + ["mcp", "--agent", agent]
        entry: dict[str, Any] = {"command": self.memoryd, "args": args}
        if agent == "codex":
            # Codex does not wait for MCP servers unless one is required: without it the
            # first request of a session may go out before memoryd's tools are there.
            entry = {**entry, "required": True}
            before = path.read_text(encoding="utf-8") if path.exists() else None
            record = self._record_for(path, "mcp")
            after: str | None = codex_server(before, entry if install else None, path)
            if not install and before is None:
                after = None
            if (not install and after is not None and record.original is not None
                    and same_toml(record.original, after)):
                after = record.original  # back to what it was: the very same text
            created = self._fresh_record(path, "mcp", before)
            if install and before is None:
                note_created(created, [FILE])
            delete = not install and after is not None and not after.strip() and (
                [FILE] in record.created)
            change = self._write(Change(agent, "mcp", path, before,
                                        None if after == before else after, delete=delete),
                                 dry_run)
            if change.changed and not dry_run:
                self._save_record(path, "mcp", created if install else None)
            return change
        before, document = load_json(path)
        record = self._record_for(path, "mcp")
        if agent == "claude":
            entry = {"type": "stdio", **entry, "env": {}}
        else:
            # Gemini asks before every call of an untrusted server's tools, and cannot
            # trust some tools only: non-interactive runs (`gemini -p`) could use none.
            entry = {**entry, "timeout": 30_000, "trust": True}
        if install:
            fresh: Record | None = self._fresh_record(path, "mcp", before)
            assert fresh is not None
            after_doc = merge_server(document, entry, fresh)
        else:
            fresh = None
            after_doc = unmerge_server(document, record)
        note = ("Gemini runs memoryd's tools without asking (trust: true), remember, correct"
                " and forget included; take `trust` out to be asked" if install
                and agent == "gemini" else "")
        return self._apply(agent, "mcp", path, before, document, after_doc, fresh, dry_run,
                           note, record)

    def _apply(self, agent: Agent, what: str, path: Path, before: str | None,
               document: dict[str, Any], after_doc: dict[str, Any], record: Record | None,
               dry_run: bool, note: str, old: Record) -> Change:
        if after_doc == document:
            return Change(agent, what, path, before, None, note)
        if record is not None and before is None:
            note_created(record, [FILE])
        delete = record is None and not after_doc and [FILE] in old.created
        after = dump_json(after_doc, like=before)
        if record is None and old.original is not None and same_json(old.original, after_doc):
            after = old.original  # back to what it was: the very same text
        change = Change(agent, what, path, before, after, note, delete)
        change = self._write(change, dry_run)
        if not dry_run:
            self._save_record(path, what, record)
        return change

    def _write(self, change: Change, dry_run: bool) -> Change:
        if dry_run or not change.changed:
            return change
        # The backup is the file as the person last had it: a file memoryd itself wrote
        # (`hooks install` then `mcp install` on Codex's config.toml) does not replace it.
        backup = not self._ours(change.path, change.before)
        if change.delete:
            if change.before is not None and backup:
                shutil.copy2(change.path, _backup_of(change.path))
            change.path.unlink(missing_ok=True)
            self._remember_written(change.path, None)
        else:
            assert change.after is not None
            write_atomically(change.path, change.after, backup=backup)
            self._remember_written(change.path, change.after)
            if change.before is None:
                self._mark(f"file:{os.path.realpath(change.path)}", {"created": True})
        return change

    def _mark(self, key: str, value: dict[str, Any] | None) -> None:
        records = self._records()
        if value is None:
            records.pop(key, None)
        else:
            records[key] = value
        make_dirs(self._records_path.parent)
        write_atomically(self._records_path, json.dumps(records, indent=2) + "\n",
                         backup=False)

    def _tidy(self, path: Path) -> None:
        """Once nothing of memoryd's is left in `path`: the file goes if memoryd created it
        and it holds nothing now (`{}`, an empty TOML file), and memoryd's backup of it
        goes too; the file is as it was before memoryd touched it."""
        real = os.path.realpath(path)
        records = self._records()
        if any(key.endswith(f":{path}") or key.endswith(f":{real}")
               for key in records if not key.startswith(("file:", "written:"))):
            return
        created = isinstance(records.get(f"file:{real}"), dict)
        target = Path(real)
        if created and target.exists() and _holds_nothing(target):
            target.unlink()
        _backup_of(target).unlink(missing_ok=True)
        self._mark(f"file:{real}", None)
        self._mark(f"written:{real}", None)

    def status(self, agent: Agent, scope: Scope) -> dict[str, Any]:
        hooks_path = settings_path(agent, "hooks", scope, self.home, self.project)
        mcp_path = settings_path(agent, "mcp", scope, self.home, self.project)
        report: dict[str, Any] = {"agent": agent, "scope": scope,
                                  "hooks_file": str(hooks_path), "mcp_file": str(mcp_path)}
        try:
            _, document = load_json(hooks_path)
            hooks = document.get("hooks") if isinstance(document.get("hooks"), dict) else {}
            assert isinstance(hooks, dict)
            runs = {event: [run for g in groups if isinstance(g, dict)
                            and isinstance(g.get("hooks"), list) for h in g["hooks"]
                            if isinstance(h, dict)
                            and (run := parse_command(h.get("command"))) is not None]
                    for event, groups in hooks.items() if isinstance(groups, list)}
            report["hooks"] = sorted(event for event, found in runs.items() if found)
            # What each hook runs must be there and answer: a hook that fails can block
            # the agent, and nothing else would tell the person.
            answered: dict[str, str | None] = {}
            report["broken"] = sorted({problem for found in runs.values() for run in found
                                       for problem in problems(run, answered)})
            if agent == "codex":
                report["untrusted"] = codex_untrusted(hooks_path, hooks, mcp_path)
        except SettingsFileError as exc:
            report["hooks_error"] = str(exc)
        report["mcp"] = self._has_server(agent, mcp_path)
        return report

    def _has_server(self, agent: Agent, path: Path) -> bool:
        if not path.exists():
            return False
        if agent == "codex":
            import tomlkit

            try:
                servers = tomlkit.parse(path.read_text(encoding="utf-8")).get("mcp_servers")
            except Exception:
                return False
            return servers is not None and SERVER_NAME in servers
        try:
            _, document = load_json(path)
        except SettingsFileError:
            return False
        servers = document.get("mcpServers")
        return isinstance(servers, dict) and SERVER_NAME in servers
