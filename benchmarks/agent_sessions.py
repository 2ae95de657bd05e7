"""What memoryd costs a real agent's session (issue 32, deliver 3).

    python -m benchmarks.agent_sessions [--runs 5] [--agents claude,codex,gemini]

Runs the pinned agent CLIs (`tests/e2e/pins.py`, installed from the npm registry on first
use) non-interactively against the end-to-end tests' fake model servers, inside a network
namespace with loopback only (re-runs itself under `unshare -n`; needs root). For each
agent, three set-ups, each on a HOME of its own with its own daemon running, installed as
the README says, default settings: no memoryd, the MCP server only (`memoryd mcp
install`), hooks and MCP (`memoryd hooks install` too). Each set-up is asked once to warm
up, then `--runs` times, taking turns; printed per set-up: the median seconds from
starting the agent to its first model request (the target: hooks + MCP add at most 0.5 s
there) and to its exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
E2E = REPO / "tests" / "e2e"
INSIDE = "AGENT_SESSIONS_BENCH_INSIDE"


SETUPS: dict[str, list[list[str]]] = {
    "no memoryd": [],
    "MCP only": [["mcp", "install", "--agent", "{agent}"]],
    "hooks + MCP": [["mcp", "install", "--agent", "{agent}"],
                    ["hooks", "install", "--agent", "{agent}"]],
}


def _measure(agent: str, runs: int, work: Path) -> dict[str, dict[str, float]]:
    """Each set-up on a HOME of its own with its own daemon; the runs go round the
    set-ups in turn (each round starting at the next one), so that the machine's slower
    and faster minutes fall on all of them alike."""
    sys.path.insert(0, str(E2E))
    from pins import installed
    from story import AGENTS

    executable = str(installed(agent))
    spec = AGENTS[agent](executable)
    shutil.rmtree(work, ignore_errors=True)
    project = work / "project"
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    requests = work / "requests.jsonl"
    requests.touch()
    url, server = spec.serve(requests)
    memoryd = str(Path(sys.executable).with_name("memoryd"))
    daemons: list[subprocess.Popen[bytes]] = []
    agent_envs: dict[str, dict[str, str]] = {}

    def session(setup: str) -> tuple[float, float]:
        began = time.time()
        done = subprocess.run(spec.argv("hello"), cwd=project, env=agent_envs[setup],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=180)
        ended = time.time()
        if done.returncode != 0:
            raise SystemExit(f"{agent} exited {done.returncode}: {done.stderr[-500:]!r}")
        first = min(record["at"] for record in map(json.loads,
                                                   requests.read_text().splitlines())
                    if record["at"] >= began and spec.is_model_request(record["path"]))
        return first - began, ended - began

    try:
        for number, (setup, commands) in enumerate(SETUPS.items()):
            home = work / f"home{number}"
            for directory in (home, work / f"tmp{number}"):
                directory.mkdir(parents=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith(
                ("MEMORYD_", "ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_"))}
            env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                       XDG_DATA_HOME=str(home / ".local" / "share"),
                       XDG_STATE_HOME=str(home / ".local" / "state"),
                       XDG_CACHE_HOME=str(home / ".cache"), TMPDIR=str(work / f"tmp{number}"),
                       PATH=f"{Path(executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
            spec.setup(url, home)
            agent_envs[setup] = {**env, **spec.environment(url, home)}
            daemon = subprocess.Popen([memoryd, "run"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=(work / f"daemon{number}.log").open("ab"))
            daemons.append(daemon)
            socket = home / ".local" / "share" / "memoryd" / "memoryd.sock"
            deadline = time.monotonic() + 60
            while not socket.exists():
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit(f"{agent}: memoryd run did not start")
                time.sleep(0.05)
            for command in commands:
                subprocess.run([memoryd, *(word.format(agent=agent) for word in command)],
                               env=env, check=True, capture_output=True)
            session(setup)  # warm-up: first-run files, page cache
        order = list(SETUPS)
        timed: dict[str, list[tuple[float, float]]] = {setup: [] for setup in order}
        for round_ in range(runs):
            for i in range(len(order)):
                setup = order[(round_ + i) % len(order)]
                timed[setup].append(session(setup))
        return {setup: {"first_request": statistics.median(t[0] for t in times),
                        "session": statistics.median(t[1] for t in times)}
                for setup, times in timed.items()}
    finally:
        for daemon in daemons:
            daemon.terminate()
            daemon.wait(30)
        server.shutdown()


def _inside(args: argparse.Namespace) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    work = Path.home() / ".cache" / "memoryd-bench" / "agent-sessions"
    results: dict[str, Any] = {}
    for agent in args.agents.split(","):
        results[agent] = _measure(agent, args.runs, work / agent)
    shutil.rmtree(work, ignore_errors=True)
    print(f"runs per set-up: {args.runs} (median), after one warm-up; seconds")
    print(f"{'agent':8} {'set-up':12} {'first request':>14} {'session':>9}"
          f" {'added to first request':>23}")
    for agent, figures in results.items():
        bare = figures["no memoryd"]["first_request"]
        for setup, numbers in figures.items():
            added = numbers["first_request"] - bare
            print(f"{agent:8} {setup:12} {numbers['first_request']:14.2f}"
                  f" {numbers['session']:9.2f} {added:+23.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--agents", default="claude,codex,gemini")
    args = parser.parse_args()
    if os.environ.get(INSIDE) == "1":
        _inside(args)
        return
    if shutil.which("unshare") is None or os.geteuid() != 0:
        raise SystemExit("needs root and `unshare` (a network namespace with loopback only)")
    done = subprocess.run(["unshare", "-n", sys.executable, "-m", "benchmarks.agent_sessions",
                           "--runs", str(args.runs), "--agents", args.agents],
                          cwd=REPO, env={**os.environ, INSIDE: "1"})
    raise SystemExit(done.returncode)


if __name__ == "__main__":
    main()
