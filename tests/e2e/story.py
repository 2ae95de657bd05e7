"""One story, told to each real agent inside a network namespace with loopback only.

    unshare -n python tests/e2e/story.py AGENT WORK EXECUTABLE

Sets up as the README says (`memoryd run`, then `memoryd hooks install --agent A &&
memoryd mcp install --agent A`), with HOME and XDG dirs under WORK, and runs the agent's
non-interactive sessions against a fake model server for its API. Writes WORK/steps.json:
for each step its exit status, its seconds and the request bodies the model received;
and WORK/memories.jsonl, what memoryd kept. The tests (`test_real_agents.py`) assert on those.

The story: a decision stated and the session killed mid-turn; a plan that states a
decision mid-way and records tasks; three one-question sessions; the next session,
resumed twice; a
related prompt that makes the model call memoryd's `recall` tool; an unrelated prompt;
the daemon hung (SIGSTOP) and stopped; a sixth session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_answer import PLAN, TRIVIA

DECISION = "Decision: refunds go through the ledger service, never straight to the PSP."
RECALL_PROMPT = "RECALL ledger refunds"


@dataclass
class Agent:
    """What differs between the agents: the model server, how a session is started,
    where transcripts go, and which requests are the model's."""

    serve: Callable[[Path], tuple[str, ThreadingHTTPServer]]
    argv: Callable[[str], list[str]]
    environment: Callable[[str, Path], dict[str, str]]
    setup: Callable[[str, Path], None]
    transcripts: str
    is_model_request: Callable[[str], bool]
    #: The same as `argv`, for the latest session in the folder, resumed.
    resume: Callable[[str], list[str]]


def _claude(executable: str) -> Agent:
    from fake_anthropic import serve

    return Agent(
        serve=serve, argv=lambda prompt: [executable, "-p", prompt],
        resume=lambda prompt: [executable, "-p", "--continue", prompt],
        environment=lambda url, home: {
            "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-e2e-test",
            "DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_ENABLE_TASKS": "1", "CLAUDE_CODE_ENABLE_TODO_TOOLS": "1"},
        setup=lambda url, home: None,
        transcripts=".claude/projects/*/*.jsonl",
        is_model_request=lambda path: path.startswith("/v1/messages")
        and "count_tokens" not in path)


def _codex(executable: str) -> Agent:
    from fake_openai import serve

    def setup(url: str, home: Path) -> None:
        # The person's own Codex config, before memoryd touches it: a model provider.
        config = home / ".codex" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f'model = "gpt-5"\nmodel_provider = "fake"\n\n'
                          f'[model_providers.fake]\nname = "fake"\nbase_url = "{url}/v1"\n'
                          'wire_api = "responses"\nenv_key = "FAKE_OPENAI_KEY"\n')

    # Codex runs a hook only once the person has reviewed and trusted it (`/hooks` in
    # its TUI); the flag stands for that review, which a non-interactive run cannot do.
    return Agent(
        serve=serve,
        argv=lambda prompt: [executable, "exec", "--skip-git-repo-check",
                             "--dangerously-bypass-hook-trust", prompt],
        resume=lambda prompt: [executable, "exec", "--skip-git-repo-check",
                               "--dangerously-bypass-hook-trust", "resume", "--last", prompt],
        environment=lambda url, home: {"FAKE_OPENAI_KEY": "sk-e2e-test"},
        setup=setup, transcripts=".codex/sessions/*/*/*/*.jsonl",
        is_model_request=lambda path: path.startswith("/v1/responses"))


def _gemini(executable: str) -> Agent:
    from fake_gemini import serve

    def setup(url: str, home: Path) -> None:
        # The person's own Gemini settings, before memoryd touches them: an API key login.
        settings = home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"security": {"auth": {
            "selectedType": "gemini-api-key"}}}))

    # `--skip-trust` stands for the person having trusted the project folder, which a
    # non-interactive run cannot ask. The model's turns are its streamed requests (the
    # others are Gemini CLI's own router asking a small model how hard the prompt is).
    return Agent(
        serve=serve, argv=lambda prompt: [executable, "--skip-trust", "-p", prompt],
        resume=lambda prompt: [executable, "--skip-trust", "--resume", "latest", "-p", prompt],
        environment=lambda url, home: {"GOOGLE_GEMINI_BASE_URL": url,
                                       "GEMINI_API_KEY": "e2e-test-key"},
        setup=setup, transcripts=".gemini/tmp/*/chats/*",
        is_model_request=lambda path: ":streamGenerateContent" in path)


AGENTS = {"claude": _claude, "codex": _codex, "gemini": _gemini}


def main(name: str, work: Path, executable: str) -> None:
    agent = AGENTS[name](executable)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    home = work / "home"
    project = work / "shop"
    for directory in (home, project, work / "tmp"):
        directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MEMORYD_", "ANTHROPIC_", "OPENAI_", "CODEX_", "GEMINI_",
                                  "GOOGLE_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_STATE_HOME=str(home / ".local" / "state"),
               XDG_CACHE_HOME=str(home / ".cache"), PYTHONUNBUFFERED="1",
               TMPDIR=str(work / "tmp"))  # the agents keep their own files under TMPDIR
    config = home / ".config" / "memoryd" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("memory:\n  embeddings:\n    fetch_model: false\n")
    requests = work / "requests.jsonl"
    requests.touch()
    url, server = agent.serve(requests)
    agent.setup(url, home)
    # The agent is on PATH, as a person's is (`hooks install` asks Codex which key it needs).
    env["PATH"] = f"{Path(executable).parent}{os.pathsep}{env.get('PATH', '')}"
    agent_env = {**env, **agent.environment(url, home)}
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
            if record["at"] >= moment and agent.is_model_request(str(record["path"])):
                found.append(record["body"])
        return found

    def transcripts_hold(text: str) -> bool:
        return any(text in path.read_text(errors="replace")
                   for path in home.glob(agent.transcripts))

    def session(step: str, prompt: str, *, kill_when: str | None = None,
                resume: bool = False) -> None:
        began = time.time()
        argv = agent.resume(prompt) if resume else agent.argv(prompt)
        proc = subprocess.Popen(argv, cwd=project, env=agent_env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        status: int | None
        if kill_when is not None:
            # Killed mid-turn: the model is answering and the person's message is in the
            # transcript (an agent may write it just after sending the request).
            deadline = time.monotonic() + 60
            while not (any(kill_when in json.dumps(b) for b in bodies_since(began))
                       and transcripts_hold(kill_when)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{step}: the model never got {kill_when!r}")
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
        steps.append({"name": step, "status": status, "seconds": time.time() - began,
                      "stdout": out.decode(errors="replace")[-2000:],
                      "stderr": err.decode(errors="replace")[-3000:],
                      "requests": bodies_since(began)})

    daemon = start_daemon()
    installed = []
    for command in (["hooks", "install", "--agent", name],
                    ["mcp", "install", "--agent", name]):
        done = subprocess.run([memoryd, *command], env=env, check=True, capture_output=True,
                              text=True)
        installed.append(done.stdout + done.stderr)
    try:
        session("killed", f"HOLD {DECISION}", kill_when="ledger service")
        # A decision stated mid-way, tasks recorded after it (Claude Code's TaskCreate),
        # then one-question sessions that must not push the work out of the briefing.
        session("planned", f"{PLAN}the deploy pipeline for staging and prod")
        for number in range(1, 4):
            session(f"trivia {number}", TRIVIA)
        session("next", "what should we do next?")
        # The same session resumed twice: told only what is new (here, nothing).
        session("resumed", "go on", resume=True)
        session("resumed again", "and go on again", resume=True)
        session("related", RECALL_PROMPT)
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
        # The agent's own CLI as the distillation model (issue 33), as a person who turns
        # it on for older sessions runs it: daemon stopped, `memoryd distill --since`.
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        distill_config = work / "distill.yaml"
        distill_config.write_text(config.read_text() + f"  llm:\n    provider: {name}-cli\n"
                                  "    per_minute: 600\n    timeout: 120s\n")
        began = time.time()
        distilled = subprocess.run(
            [memoryd, "--config", str(distill_config), "distill", "--since", "1 day ago"],
            env=agent_env, capture_output=True, text=True, timeout=600)
        steps.append({"name": "distill", "status": distilled.returncode,
                      "seconds": time.time() - began, "stdout": distilled.stdout[-2000:],
                      "stderr": distilled.stderr[-3000:], "requests": bodies_since(began)})
        exported = subprocess.run([memoryd, "export"], env=env, check=True,
                                  capture_output=True, text=True).stdout
        (work / "memories.jsonl").write_text(exported)
        listed = subprocess.run([memoryd, "sessions", "--json"], env=env,
                                capture_output=True, text=True)
        (work / "sessions.json").write_text(listed.stdout if listed.returncode == 0 else "[]")
    finally:
        daemon.send_signal(signal.SIGCONT)
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        server.shutdown()
        (work / "steps.json").write_text(json.dumps(steps))
        (work / "installed.txt").write_text("\n".join(installed))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
