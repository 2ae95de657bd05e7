"""Planted secrets and personal data: are they masked everywhere memory shows text?

    python -m benchmarks.privacy

The real Claude Code fixture transcripts (`shared/fixtures/transcripts/claude`)
are copied into a temporary root, and each gets three more lines planting one
item of every kind below, with values unique to the file and the place: in what
the person typed, in a tool call's input (a Bash command: stored as escaped
JSON) and in a tool's output. memoryd then runs as users run it (`memoryd run`
with default settings but JSON logs at debug level and a JSONL layer behind the
embedded store, `sync`), and every place stored or memory text leaves memoryd
is read: `export`, the JSONL layer's files, `recall --json` and `context` for each
planted line, `show` of every session (the model and person views, and `--json`),
the API's `search_sessions` (what an agent's MCP tool gets), the web viewer's session
and memory pages, and every log line of the daemon and the commands. A planted value
found anywhere is a leak.

False positives: `[REDACTED:` markers in the export outside the planted
lines, i.e. in the unplanted real text, are counted and listed by kind.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from benchmarks._common import SHARED, isolated_env, machine, memoryd_command, write_config

FIXTURES = SHARED / "fixtures" / "transcripts" / "claude"


def _token(rng: random.Random, n: int, alphabet: str = string.ascii_letters + string.digits
           ) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _luhn_card(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    total = 0
    for position, value in enumerate(reversed(digits)):
        if position % 2 == 0:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    digits.append((10 - total % 10) % 10)
    text = "".join(map(str, digits))
    return " ".join(text[i:i + 4] for i in range(0, 16, 4))


def _iban(rng: random.Random) -> str:
    bban = "".join(str(rng.randrange(10)) for _ in range(18))
    number = int("".join(str(int(c, 36)) for c in bban + "DE00"))
    check = 98 - number % 97
    raw = f"DE{check:02d}{bban}"
    return " ".join(raw[i:i + 4] for i in range(0, len(raw), 4))


def _discord(rng: random.Random) -> str:
    return "MT" + _token(rng, 22) + "." + _token(rng, 6) + "." + _token(rng, 38)


def _ssn(rng: random.Random) -> str:
    return f"{rng.randrange(100, 665)}-{rng.randrange(10, 99)}-{rng.randrange(1000, 9999)}"


def plants(rng: random.Random) -> list[tuple[str, str, str]]:
    """(kind, the text planted, the value that must never show) for one file."""
    aws_id = "AKIA" + _token(rng, 16, string.ascii_uppercase + string.digits)
    aws_secret = _token(rng, 38) + "a1"
    password = _token(rng, 10) + "7!"
    return [
        ("openai_key", f"OPENAI_API_KEY=sk-proj-{(v := _token(rng, 40))}", v),
        ("anthropic_key", f"key sk-ant-api03-{(v := _token(rng, 60))}", v),
        ("github_token", f"token ghp_{(v := _token(rng, 36))}", v),
        ("gitlab_token", f"glpat-{(v := _token(rng, 20))}", v),
        ("stripe_key", f"sk_live_{(v := _token(rng, 24))}", v),
        ("slack_token", f"xoxb-1234567890-{(v := _token(rng, 24))}", v),
        ("npm_token", f"npm_{(v := _token(rng, 36))}", v),
        ("aws_pair", f"{aws_id} {aws_secret}", aws_secret),
        ("db_password", f"DB_PASS={(v := _token(rng, 14))}", v),
        ("json_password", f'{{"password": "{(v := _token(rng, 14))}"}}', v),
        ("url_password", f"postgres://app:{(v := _token(rng, 12))}@db.internal:5432/x", v),
        ("basic_auth", f"Authorization: Basic {(v := _token(rng, 24))}==", v),
        ("prose_password", f"from now on use the deploy password {password}", password),
        ("private_key", "-----BEGIN RSA PRIVATE KEY-----\n"
                        f"{(v := _token(rng, 64))}\n-----END RSA PRIVATE KEY-----", v),
        ("private_tag", f"<private>my home address is {(v := _token(rng, 12))} street</private>",
         v),
        ("email", f"write to {(v := _token(rng, 8).lower())}@example.org", v),
        ("phone", f"call +49 30 {(v := str(rng.randrange(1000000, 9999999)))}", v),
        ("card", f"card {(v := _luhn_card(rng))}", v),
        ("iban", f"IBAN {(v := _iban(rng))}", v),
        ("ip", f"the box at {(v := f'198.51.{rng.randrange(256)}.{rng.randrange(1, 255)}')}",
         v),
        ("huggingface_token", f"HF token hf_{(v := _token(rng, 34))}", v),
        ("vault_token", f"VAULT_TOKEN=hvs.{(v := _token(rng, 24))}", v),
        ("shopify_token", f"shpat_{(v := _token(rng, 32, '0123456789abcdef'))}", v),
        ("digitalocean_token", f"dop_v1_{(v := _token(rng, 64, '0123456789abcdef'))}", v),
        ("square_token", f"sq0atp-{(v := _token(rng, 22))}", v),
        ("telegram_token",
         f"bot {rng.randrange(10**8, 10**9)}:{(v := 'AA' + _token(rng, 33))}", v),
        ("discord_token", f"discord bot token {(v := _discord(rng))}", v),
        ("redis_password", f"redis://:{(v := _token(rng, 16))}@cache.internal:6379", v),
        ("aws_secret_prose",
         f"the aws secret access key is {(v := _token(rng, 38) + 'Zq')}", v),
        ("password_in_words",
         f"the password for the staging box is {(v := _token(rng, 9) + '3#')}", v),
        ("netrc", f"machine api.example.org login deploy password {(v := _token(rng, 14))}",
         v),
        ("ssn", f"my SSN is {(v := _ssn(rng))}", v),
    ]


#: Where a file's planted items are written: what the person typed, a tool call's input
#: (a Bash command, so the items are JSON-escaped in the stored line), a tool's output.
PLACES = ("user text", "tool input", "tool output")


def _planted_lines(session: str, number: int, texts: dict[str, str]) -> list[dict[str, object]]:
    call = f"toolu_planted_{number}"
    return [
        {"type": "user", "uuid": f"planted-{number}-user", "sessionId": session,
         "timestamp": "2026-01-01T00:00:00Z",
         "message": {"role": "user", "content": texts["user text"]}},
        {"type": "assistant", "uuid": f"planted-{number}-call", "sessionId": session,
         "timestamp": "2026-01-01T00:00:01Z",
         "message": {"role": "assistant", "content": [
             {"type": "tool_use", "id": call, "name": "Bash",
              "input": {"command": texts["tool input"],
                        "description": "write the notes down"}}]}},
        {"type": "user", "uuid": f"planted-{number}-result", "sessionId": session,
         "timestamp": "2026-01-01T00:00:02Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": call, "content": texts["tool output"],
              "is_error": False}]}},
    ]


def main() -> int:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="memoryd-privacy-") as tmp:
        work = Path(tmp)
        project = work / "claude" / "-home-user-project"
        project.mkdir(parents=True)
        # kind, place, value, marker word, file
        planted: list[tuple[str, str, str, str, str]] = []
        files = [p for p in sorted(FIXTURES.iterdir())
                 if p.suffix == ".jsonl" and "__subagents__" not in p.name]
        for number, path in enumerate(files):
            target = project / path.name.split("__")[-1]
            shutil.copy(path, target)
            texts: dict[str, str] = {}
            for place in PLACES:
                items = plants(rng)
                marker = f"planted{place.split()[-1]}marker{number}"
                texts[place] = f"{marker} notes:\n" + "\n".join(t for _k, t, _v in items)
                planted += [(kind, place, value, marker, target.name)
                            for kind, _t, value in items]
            with target.open("a") as handle:
                if not target.read_bytes().endswith(b"\n"):
                    handle.write("\n")  # a fixture whose last line has no newline yet
                for line in _planted_lines(target.stem, number, texts):
                    handle.write(json.dumps(line) + "\n")
        state = work / "state"
        config = write_config(work / "config.yaml", state, work / "claude",
                              log_level="debug",
                              memory={"backends": ["sqlite", "jsonl"],
                                      "embeddings": {"fetch_model": False}})
        env = isolated_env(work / "xdg")

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(memoryd_command(config, *args), env=env,
                                  capture_output=True, text=True, timeout=600)

        outputs: dict[str, str] = {}
        daemon_log = work / "daemon.log"
        with daemon_log.open("w") as log:
            daemon = subprocess.Popen(memoryd_command(config, "run"), env=env,
                                      stdout=subprocess.DEVNULL, stderr=log)
        socket = state / "memoryd.sock"
        try:
            deadline = time.monotonic() + 60
            while not socket.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            api = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                               base_url="http://memoryd", timeout=120)
            # Everything read and saved (sync reads to the end through the daemon).
            for name, args in (("sync", ("sync",)), ("export", ("export",)),
                               ("sessions", ("sessions", "--all", "--json"))):
                done = run(*args)
                outputs[f"{name} (stdout)"], outputs[f"{name} (log)"] = done.stdout, done.stderr
            listed = json.loads(outputs["sessions (stdout)"])
            if isinstance(listed, dict):
                listed = listed.get("sessions", [])
            refs = [str(s.get("id")) for s in listed]
            for ref in refs:
                for view in (("--view", "model"), ("--view", "person"), ("--json",)):
                    done = run("show", ref, *view)
                    outputs[f"show {ref} {view[-1]}"] = done.stdout + done.stderr
            for marker in sorted({m for *_x, m, _f in planted}):
                done = run("recall", "--json", marker + " notes")
                outputs[f"recall {marker}"] = done.stdout + done.stderr
                done = run("context", "--query", marker + " notes")
                outputs[f"context {marker}"] = done.stdout + done.stderr
                found = api.post("/v1/search_sessions", json={"query": marker, "limit": 50})
                outputs[f"search_sessions {marker}"] = found.text
            done = run("ui", "--no-browser")
            url = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            if url.startswith("http"):
                viewer = httpx.Client(follow_redirects=True, timeout=60)
                viewer.get(url)  # the login link sets the session cookie
                base = url.split("/login")[0]
                for ref in refs:
                    outputs[f"viewer session {ref}"] = viewer.get(f"{base}/sessions/{ref}").text
                for marker in sorted({m for *_x, m, _f in planted}):
                    outputs[f"viewer memories {marker}"] = viewer.get(
                        f"{base}/memories", params={"q": marker}).text
            else:
                print(f"viewer: not reached ({done.stderr.strip()[:200]})")
        finally:
            daemon.terminate()
            daemon.wait(60)
        outputs["daemon (log)"] = daemon_log.read_text()
        for jsonl in sorted((state / "memory-jsonl").rglob("*.jsonl")):
            outputs[f"jsonl {jsonl.name}"] = jsonl.read_text()
        leaks: Counter[tuple[str, str]] = Counter()
        where: Counter[str] = Counter()
        for kind, place, value, _marker, _file in planted:
            seen = [name.split(" (")[0].split(" ")[0] for name, text in outputs.items()
                    if value in text]
            if seen:
                leaks[kind, place] += 1
                where.update(set(seen))
        export = outputs["export (stdout)"]
        unplanted = [json.loads(line)["content"] for line in export.splitlines() if line]
        # A planted message runs from its marker to the next message's line.
        unplanted_text = re.sub(r"planted\w+marker\d+ notes:.*?(?=\n(?:user|assistant)\b|\Z)",
                                "", "\n".join(unplanted), flags=re.S)
        false_positives = Counter(re.findall(r"\[REDACTED:(\w+)\]", unplanted_text))
        reached = sum(1 for marker in {m for *_x, m, _f in planted} if marker in export)
    kinds = sorted({k for k, *_ in planted})
    per = Counter((k, p) for k, p, *_ in planted)
    print(f"machine: {machine()}")
    print(f"{len(files)} fixture transcripts, {len(planted)} planted items "
          f"({len(kinds)} kinds x {len(PLACES)} places); planted lines whose marker reached "
          f"memory: {reached}/{len(files) * len(PLACES)} (a tool's output that worked is not "
          "memory text)")
    print("\n| kind | " + " | ".join(f"{p}: leaked" for p in PLACES) + " |")
    print("|---|" + "---|" * len(PLACES))
    for kind in kinds:
        print(f"| {kind} | " + " | ".join(
            f"{leaks[kind, p]}/{per[kind, p]}" for p in PLACES) + " |")
    total_bad = sum(leaks.values())
    print(f"\nall: {len(planted) - total_bad}/{len(planted)} masked "
          f"({100 * (len(planted) - total_bad) / len(planted):.1f} %) in memory, the JSONL "
          "layer, exports, recall, context blocks, show, search_sessions, the viewer and logs")
    if where:
        print(f"leaks seen in: {dict(where)}")
    print(f"false positives in unplanted memory text: {sum(false_positives.values())} "
          f"({dict(false_positives)})")
    return 0 if total_bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
