"""The Claude Code story, run inside a network namespace with loopback only.

    unshare -n python tests/e2e/claude_story.py WORK CLAUDE

Sets up as the README says (`memoryd run`, `memoryd hooks install --agent claude &&
memoryd mcp install --agent claude`), with HOME and XDG dirs under WORK, and runs
`claude -p` sessions against the fake model server. Writes WORK/steps.json: for each
step its exit status, its seconds and the request bodies the model received. The
test (`test_claude_code.py`) asserts on those.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_anthropic import serve

DECISION = "Decision: refunds go through the ledger service, never straight to the PSP."


def main(work: Path, claude: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    home = work / "home"
    project = work / "shop"
    for directory in (home, project):
        directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "ANTHROPIC_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_STATE_HOME=str(home / ".local" / "state"),
               XDG_CACHE_HOME=str(home / ".cache"), PYTHONUNBUFFERED="1",
               TMPDIR=str(work / "tmp"))  # Claude Code keeps its own files under TMPDIR
    (work / "tmp").mkdir(exist_ok=True)
    config = home / ".config" / "memoryd" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("memory:\n  embeddings:\n    fetch_model: false\n")
    requests = work / "requests.jsonl"
    requests.touch()
    url, server = serve(requests)
    agent_env = {**env, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-e2e-test",
                 "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    memoryd = str(Path(sys.executable).with_name("memoryd"))
    state = home / ".local" / "share" / "memoryd"
    steps: list[dict[str, Any]] = []

    def start_daemon() -> subprocess.Popen[bytes]:
        log = (work / "daemon.log").open("ab")
        proc = subprocess.Popen([memoryd, "run"], env=env, stdout=subprocess.DEVNULL,
                                stderr=log)
        deadline = time.monotonic() + 60
        while not (state / "memoryd.sock").exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("memoryd run did not start")
            time.sleep(0.05)
        return proc

    def bodies_since(moment: float) -> list[Any]:
        found = []
        for line in requests.read_text().splitlines():
            record = json.loads(line)
            if record["at"] >= moment and str(record["path"]).startswith("/v1/messages"):
                found.append(record["body"])
        return found

    def transcripts_hold(text: str) -> bool:
        return any(text in path.read_text(errors="replace")
                   for path in (home / ".claude" / "projects").glob("*/*.jsonl"))

    def session(name: str, prompt: str, *, kill_when: str | None = None) -> None:
        began = time.time()
        proc = subprocess.Popen([claude, "-p", prompt], cwd=project, env=agent_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        status: int | None
        if kill_when is not None:
            # Killed mid-turn: the model is answering and the person's message is in the
            # transcript (Claude Code may write it just after sending the request).
            deadline = time.monotonic() + 60
            while not (any(kill_when in json.dumps(b) for b in bodies_since(began))
                       and transcripts_hold(kill_when)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: the model never got {kill_when!r}")
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = None
        else:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            status = proc.returncode
        out, err = proc.communicate()
        steps.append({"name": name, "status": status, "seconds": time.time() - began,
                      "stdout": out.decode(errors="replace")[-2000:],
                      "stderr": err.decode(errors="replace")[-2000:],
                      "requests": bodies_since(began)})

    daemon = start_daemon()
    for command in (["hooks", "install", "--agent", "claude"],
                    ["mcp", "install", "--agent", "claude"]):
        subprocess.run([memoryd, *command], env=env, check=True, capture_output=True)
    try:
        session("killed", f"HOLD {DECISION}", kill_when="ledger service")
        session("next", "what should we do next?")
        session("related", "how do refunds reach the PSP again?")
        session("unrelated", "rename the logger in utils.py")
        daemon.send_signal(signal.SIGSTOP)
        session("daemon hung", "hello")
        daemon.send_signal(signal.SIGCONT)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        session("daemon stopped", "hello again")
        daemon = start_daemon()
        session("sixth", "and one more session")
        subprocess.run([memoryd, "sync"], env=env, check=True, capture_output=True)
        exported = subprocess.run([memoryd, "export"], env=env, check=True,
                                  capture_output=True, text=True).stdout
        (work / "memories.jsonl").write_text(exported)
    finally:
        daemon.send_signal(signal.SIGCONT)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        server.shutdown()
        (work / "steps.json").write_text(json.dumps(steps))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
