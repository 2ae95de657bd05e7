"""Installing memoryd as a user service: a systemd user unit on Linux, a launchd agent on macOS.

The unit files in the repository (`systemd/memoryd.service`,
`launchd/io.memoryd.daemon.plist`) are the templates; installing fills in the
real path of the memoryd executable, the config file and the state directory.
Every action is a list of commands, so `--dry-run` can print exactly what
would run.
"""

from __future__ import annotations

import os
import plistlib
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from memoryd.config import Settings
from memoryd.files import atomic_write, make_dirs

UNIT_NAME = "memoryd.service"
LAUNCHD_LABEL = "io.memoryd.daemon"
#: launchd/systemd wait this much longer than memoryd's own shutdown grace.
STOP_MARGIN = 15.0

_REPO = Path(__file__).resolve().parents[1]


def _template(repo_relative: str, packaged: str) -> str:
    """A unit template: packaged in the wheel, or read from the source tree."""
    try:
        return resources.files("memoryd").joinpath("_units", packaged).read_text("utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return (_REPO / repo_relative).read_text("utf-8")


def systemd_template() -> str:
    return _template("systemd/memoryd.service", "memoryd.service")


def launchd_template() -> bytes:
    return _template(f"launchd/{LAUNCHD_LABEL}.plist", f"{LAUNCHD_LABEL}.plist").encode()


def memoryd_argv() -> list[str]:
    """How to start this very memoryd: its console script, else this interpreter."""
    script = Path(sys.argv[0])
    if script.name == "memoryd" and script.exists():
        return [str(script.resolve())]
    return [sys.executable, "-m", "memoryd"]


def _systemd_quote(arg: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(settings: Settings, argv: list[str], config: Path | None) -> str:
    command = [*argv, "run", *(["--config", str(config)] if config else [])]
    text = systemd_template()
    text = re.sub(r"^ExecStart=.*$", "ExecStart=" + " ".join(map(_systemd_quote, command)),
                  text, count=1, flags=re.M)
    text = re.sub(r"^ReadWritePaths=.*$",
                  f"ReadWritePaths=-{_systemd_quote(str(settings.state_dir))}",
                  text, count=1, flags=re.M)
    grace = int(settings.shutdown_grace + STOP_MARGIN)
    return re.sub(r"^TimeoutStopSec=.*$", f"TimeoutStopSec={grace}s", text, count=1, flags=re.M)


def log_location(environ: dict[str, str], home: Path, pid: int) -> str:
    """Where this daemon's log lines go, in words a person can act on: its service
    manager's log when one started it, else the standard error of its own process."""
    if environ.get("JOURNAL_STREAM") or environ.get("INVOCATION_ID"):
        return f"its log: journalctl --user -u {UNIT_NAME}"
    if LAUNCHD_LABEL in environ.get("XPC_SERVICE_NAME", ""):
        return f"its log: {home / 'Library' / 'Logs' / 'memoryd' / 'memoryd.err.log'}"
    return f"the standard error of `memoryd run` (pid {pid})"


def render_launchd(settings: Settings, argv: list[str], config: Path | None, home: Path) -> bytes:
    plist = plistlib.loads(launchd_template())
    plist["ProgramArguments"] = [*argv, "run", *(["--config", str(config)] if config else [])]
    logs = home / "Library" / "Logs" / "memoryd"
    plist["StandardOutPath"] = str(logs / "memoryd.out.log")
    plist["StandardErrorPath"] = str(logs / "memoryd.err.log")
    plist["ExitTimeOut"] = int(settings.shutdown_grace + STOP_MARGIN)
    return plistlib.dumps(plist)


@dataclass(slots=True)
class Plan:
    """What an action does: files to write or remove, then commands to run."""

    description: str
    write: dict[Path, bytes] = field(default_factory=dict)
    remove: list[Path] = field(default_factory=list)
    make_dirs: list[Path] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class ServiceManager:
    """Plans service actions for one platform (`linux` or `macos`)."""

    def __init__(self, settings: Settings, *, platform: str, home: Path,
                 config: Path | None, argv: list[str] | None = None) -> None:
        if platform not in ("linux", "macos"):
            raise ValueError(f"memoryd service supports linux and macos, not {platform}")
        self.settings = settings
        self.platform = platform
        self.home = home
        self.config = config
        self.argv = argv or memoryd_argv()
        self.uid = os.getuid()

    @property
    def unit_path(self) -> Path:
        if self.platform == "linux":
            return self.home / ".config" / "systemd" / "user" / UNIT_NAME
        return self.home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"

    @property
    def _target(self) -> str:
        return f"gui/{self.uid}/{LAUNCHD_LABEL}"

    def unit_text(self) -> bytes:
        if self.platform == "linux":
            return render_systemd(self.settings, self.argv, self.config).encode()
        return render_launchd(self.settings, self.argv, self.config, self.home)

    def install(self) -> Plan:
        plan = Plan(f"install memoryd as a {self._kind}")
        plan.make_dirs = [self.unit_path.parent, self.settings.state_dir]
        plan.write[self.unit_path] = self.unit_text()
        if self.platform == "linux":
            plan.commands = [["systemctl", "--user", "daemon-reload"],
                             ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
        else:
            plan.make_dirs.append(self.home / "Library" / "Logs" / "memoryd")
            plan.commands = [["launchctl", "bootout", self._target],
                             ["launchctl", "bootstrap", f"gui/{self.uid}", str(self.unit_path)]]
        return plan

    def uninstall(self) -> Plan:
        plan = Plan(f"uninstall the memoryd {self._kind}")
        if not self.unit_path.exists():
            # Never installed (`memoryd run` alone): nothing to stop, nothing to remove,
            # and a service manager that cannot be reached is no failure of that.
            plan.notes.append(f"no memoryd {self._kind} is installed ({self.unit_path} "
                              "does not exist): nothing to stop or remove")
            return plan
        if self.platform == "linux":
            plan.commands = [["systemctl", "--user", "disable", "--now", UNIT_NAME]]
        else:
            plan.commands = [["launchctl", "bootout", self._target]]
        plan.remove = [self.unit_path]
        if self.platform == "linux":
            plan.commands.append(["systemctl", "--user", "daemon-reload"])
        plan.notes.append(f"your data stays in {self.settings.state_dir} "
                          "(delete it yourself to remove every stored message and memory)")
        return plan

    def simple(self, action: str, follow: bool = False) -> Plan:
        linux = {
            "status": ["systemctl", "--user", "status", "--no-pager", UNIT_NAME],
            "start": ["systemctl", "--user", "start", UNIT_NAME],
            "stop": ["systemctl", "--user", "stop", UNIT_NAME],
            "restart": ["systemctl", "--user", "restart", UNIT_NAME],
            "logs": ["journalctl", "--user", "-u", UNIT_NAME, "-n", "200", "--no-pager",
                     *(["-f"] if follow else [])],
        }
        err_log = str(self.home / "Library" / "Logs" / "memoryd" / "memoryd.err.log")
        macos = {
            "status": ["launchctl", "print", self._target],
            "start": ["launchctl", "kickstart", self._target],
            "stop": ["launchctl", "kill", "SIGTERM", self._target],
            "restart": ["launchctl", "kickstart", "-k", self._target],
            "logs": ["tail", "-n", "200", *(["-f"] if follow else []), err_log],
        }
        table = linux if self.platform == "linux" else macos
        return Plan(f"{action} the memoryd {self._kind}", commands=[table[action]])

    @property
    def _kind(self) -> str:
        return "systemd user service" if self.platform == "linux" else "launchd agent"


@dataclass(slots=True)
class CommandFailure:
    command: list[str]
    returncode: int
    output: str


def execute(plan: Plan, *, tolerate_first_failure: bool = False) -> CommandFailure | None:
    """Carry out a plan; the first command that fails stops it and is returned."""
    for directory in plan.make_dirs:
        make_dirs(directory)
    for path, data in plan.write.items():
        # A unit file is read by the service manager: readable, written by its user only.
        atomic_write(path, data, mode=0o644)
    for path in plan.remove:
        path.unlink(missing_ok=True)
    for i, command in enumerate(plan.commands):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CommandFailure(command, 127, str(exc))
        if done.returncode != 0 and not (tolerate_first_failure and i == 0):
            return CommandFailure(command, done.returncode, (done.stderr or done.stdout).strip())
    return None


#: What systemctl and launchctl print when there is no service manager to talk to.
_NO_MANAGER = ("failed to connect to bus", "no medium found", "could not connect to",
               "$dbus_session_bus_address", "bootstrap failed: 5")


def unreachable(output: str) -> str | None:
    """One sentence for a service manager that cannot be reached, from its output; None
    when the output says something else."""
    if not any(mark in output.lower() for mark in _NO_MANAGER):
        return None
    return ("the user's service manager is not reachable (no systemd user session here:"
            " log in through a login session, or run `loginctl enable-linger $USER` once);"
            " `memoryd status` says whether memoryd itself runs")


def describe(plan: Plan) -> str:
    """The plan as text, for --dry-run."""
    lines = [f"# {plan.description}"]
    for directory in plan.make_dirs:
        lines.append(f"mkdir -p {shlex.quote(str(directory))}")
    for path, data in plan.write.items():
        lines.append(f"# write {path}:")
        lines.append(data.decode())
    for path in plan.remove:
        lines.append(f"rm -f {shlex.quote(str(path))}")
    lines.extend(shlex.join(command) for command in plan.commands)
    lines.extend(f"# {note}" for note in plan.notes)
    return "\n".join(lines)
