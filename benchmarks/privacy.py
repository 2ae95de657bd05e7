"""Planted secrets and personal data: are they masked everywhere memory shows text?

    python -m benchmarks.privacy

The real Claude Code fixture transcripts (`shared/fixtures/transcripts/claude`)
are copied into a temporary root, and each gets one more user line planting
one item of every kind below, with values unique to the file. memoryd then
runs as users run it (`ingest --once`, `sync`, default settings, JSON logs at
debug level), and every place memory text leaves memoryd is read: `export`,
`recall --json` and `context` for each planted line, and every log line of
those commands. A planted value found anywhere is a leak.

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
from collections import Counter
from pathlib import Path

from benchmarks._common import REPO, isolated_env, machine, memoryd_command, write_config

FIXTURES = REPO.parent / "shared" / "fixtures" / "transcripts" / "claude"


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
    ]


def main() -> int:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="memoryd-privacy-") as tmp:
        work = Path(tmp)
        project = work / "claude" / "-home-user-project"
        project.mkdir(parents=True)
        planted: list[tuple[str, str, str, str]] = []  # kind, value, marker word, file
        files = [p for p in sorted(FIXTURES.iterdir())
                 if p.suffix == ".jsonl" and "__subagents__" not in p.name]
        for number, path in enumerate(files):
            target = project / path.name.split("__")[-1]
            shutil.copy(path, target)
            items = plants(rng)
            marker = f"plantedmarker{number}"
            text = f"{marker} notes: " + "; ".join(t for _k, t, _v in items)
            with target.open("a") as handle:
                if not target.read_bytes().endswith(b"\n"):
                    handle.write("\n")  # a fixture whose last line has no newline yet
                handle.write(json.dumps({
                    "type": "user", "uuid": f"planted-{number}", "sessionId": target.stem,
                    "timestamp": "2026-01-01T00:00:00Z",
                    "message": {"role": "user", "content": text}}) + "\n")
            planted += [(kind, value, marker, target.name) for kind, _t, value in items]
        config = write_config(work / "config.yaml", work / "state", work / "claude",
                              log_level="debug",
                              memory={"embeddings": {"fetch_model": False}})
        env = isolated_env(work / "xdg")

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(memoryd_command(config, *args), env=env,
                                  capture_output=True, text=True, timeout=600)

        outputs: dict[str, str] = {}
        for name, args in (("ingest", ("ingest", "--once")), ("sync", ("sync",)),
                           ("export", ("export",))):
            done = run(*args)
            outputs[f"{name} (stdout)"], outputs[f"{name} (log)"] = done.stdout, done.stderr
        for marker in sorted({m for _k, _v, m, _f in planted}):
            done = run("recall", "--json", marker + " notes")
            outputs[f"recall {marker}"] = done.stdout + done.stderr
            done = run("context", "--query", marker + " notes")
            outputs[f"context {marker}"] = done.stdout + done.stderr
        leaks: Counter[str] = Counter()
        for kind, value, _marker, _file in planted:
            if any(value in text for text in outputs.values()):
                leaks[kind] += 1
        export = outputs["export (stdout)"]
        unplanted = [json.loads(line)["content"] for line in export.splitlines() if line]
        unplanted_text = re.sub(r"plantedmarker\d+ notes:[^\n]*", "", "\n".join(unplanted))
        false_positives = Counter(re.findall(r"\[REDACTED:(\w+)\]", unplanted_text))
        reached = sum(1 for marker in {m for _k, _v, m, _f in planted}
                      if marker in export)
    kinds = sorted({k for k, *_ in planted})
    per_kind = Counter(k for k, *_ in planted)
    print(f"machine: {machine()}")
    print(f"{len(files)} fixture transcripts, {len(planted)} planted items "
          f"({len(kinds)} kinds); planted lines that reached memory: {reached}/{len(files)}")
    print("\n| kind | planted | leaked | masked |\n|---|---|---|---|")
    for kind in kinds:
        n, bad = per_kind[kind], leaks[kind]
        print(f"| {kind} | {n} | {bad} | {100 * (n - bad) / n:.0f} % |")
    total_bad = sum(leaks.values())
    print(f"\nall: {len(planted) - total_bad}/{len(planted)} masked "
          f"({100 * (len(planted) - total_bad) / len(planted):.1f} %) in memory, recall, "
          "context blocks, exports and logs")
    print(f"false positives in unplanted memory text: {sum(false_positives.values())} "
          f"({dict(false_positives)})")
    return 0 if total_bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
