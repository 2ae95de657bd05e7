"""What an agent's hook runs, kept where a reinstall of memoryd cannot take it away.

Every hook `memoryd hooks install` writes runs the shell client (`memoryd-hook.sh`). The
packaged file lives inside the installed package, which `pip install` replaces (the
README's own test command does): a hook naming it would fail with "cannot open", exit 2,
and Claude Code blocks a prompt on exit 2. So the hooks name a copy in memoryd's state
directory, written atomically (a hook running it meanwhile reads the old file whole) and
refreshed when the packaged one changes (`memoryd hooks install`, every `memoryd run`),
and the command first checks that the copy is there: without it the hook exits 0, silent.

`problems` says what is wrong with what an installed hook runs (`hooks status`, `doctor`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd.files import atomic_write, make_dirs

log = structlog.get_logger(__name__)

#: The shell hook client as the package ships it.
PACKAGED_CLIENT = Path(__file__).with_name("memoryd-hook.sh")
#: The shell that runs it (named, so that the file needs no execute bit and no agent's
#: choice of shell matters).
SHELL = "/bin/sh"
#: Runs the client only if it is there: a missing file is a silent exit 0, never the
#: shell's "cannot open" (exit 2 in dash, which blocks a Claude Code prompt).
GUARD = '[ -r "$1" ] || exit 0; exec /bin/sh "$@"'
#: `$0` of the guard's shell: what `ps` shows for a hook.
NAME = "memoryd-hook"
#: How long `problems` waits for memoryd to answer `--version`.
PROBE_SECONDS = 20.0


def stable_client(state_dir: Path) -> Path:
    """Where the hooks' copy of the client lives: beside the socket it talks to."""
    return state_dir / "hooks" / PACKAGED_CLIENT.name


def refresh_client(target: Path) -> bool:
    """Write the packaged client to `target` (`stable_client`) if it differs; whether it
    was written. A package already replaced under a running daemon has no file to copy:
    left as is."""
    try:
        packaged = PACKAGED_CLIENT.read_bytes()
    except OSError:
        return False
    try:
        if target.read_bytes() == packaged:
            return False
    except OSError:
        pass
    make_dirs(target.parent)
    atomic_write(target, packaged, mode=0o600)
    log.info("hook_client_written", path=str(target))
    return True


def hook_command(client: Path, memoryd: str, agent: str, event: str, socket: Path,
                 timeout: float, config: str | None = None) -> str:
    """The command line an agent runs for one of memoryd's hooks."""
    extra = ["--config", config] if config else []
    return shlex.join([SHELL, "-c", GUARD, NAME, str(client), memoryd, "hook", "--agent",
                       agent, "--socket", str(socket), "--timeout", f"{timeout:g}", *extra,
                       event])


@dataclass(frozen=True, slots=True)
class HookRun:
    """What one installed hook's command runs."""

    client: str | None  # None: memoryd itself, no shell client
    memoryd: str
    argv: list[str]  # `hook --agent ...`
    guarded: bool  # a missing client exits 0


def parse_command(command: object) -> HookRun | None:
    """What a memoryd hook's command runs; None for a command that is not memoryd's hook.
    Knows the commands of earlier installs too, so that installing again replaces them."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if (len(words) >= 8 and words[1:4] == ["-c", GUARD, NAME]
            and os.path.basename(words[4]) == PACKAGED_CLIENT.name
            and words[6:8] == ["hook", "--agent"]):
        return HookRun(words[4], words[5], words[6:], guarded=True)
    if len(words) >= 5 and os.path.basename(words[1]) == PACKAGED_CLIENT.name and words[3:5] == [
            "hook", "--agent"]:
        return HookRun(words[1], words[2], words[3:], guarded=False)
    if len(words) >= 3 and os.path.basename(words[0]).startswith("memoryd") and words[1:3] == [
            "hook", "--agent"]:
        return HookRun(None, words[0], words[1:], guarded=False)
    return None


def problems(run: HookRun, answered: dict[str, str | None]) -> list[str]:
    """What is wrong with what a hook runs: a client or memoryd that is not there, a memoryd
    that does not answer, a client inside the installed package (a reinstall breaks it).
    `answered` caches each memoryd's answer (None: it answered)."""
    found: list[str] = []
    if run.client is not None:
        if not os.access(run.client, os.R_OK):
            found.append(f"{run.client} is missing"
                         + ("" if run.guarded else ": the hook fails (exit 2 blocks a prompt)"))
        elif not run.guarded:
            found.append(f"{run.client} is inside the installed package: reinstalling"
                         " memoryd breaks the hook")
    if run.memoryd not in answered:
        answered[run.memoryd] = _answers(run.memoryd)
    trouble = answered[run.memoryd]
    if trouble is not None:
        found.append(trouble)
    return found


def _answers(memoryd: str) -> str | None:
    if not os.access(memoryd, os.X_OK):
        return f"{memoryd} is missing or not executable"
    try:
        done = subprocess.run([memoryd, "--version"], capture_output=True, timeout=PROBE_SECONDS,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{memoryd} does not answer ({type(exc).__name__})"
    if done.returncode != 0:
        return f"{memoryd} --version exited {done.returncode}"
    return None
