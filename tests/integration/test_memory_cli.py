"""Managing memory from the command line: remember, correct, forget, time, context, export."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import daemon_env, memoryd_command, write_config


class Cli:
    def __init__(self, tmp_path: Path, name: str = "state") -> None:
        self.tmp_path = tmp_path
        self.state = tmp_path / name
        self.config = write_config(tmp_path / f"{name}.yaml", self.state,
                                   {"claude": tmp_path / "none"})

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(memoryd_command("--config", str(self.config), *args),
                              env=daemon_env(self.tmp_path), capture_output=True, text=True,
                              timeout=60)
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_remember_then_recall_with_project_scope(cli: Cli) -> None:
    """A remembered fact is recalled first, kept to its project unless --all-projects."""
    fact = cli.json("remember", "we deploy to staging before production", "--project",
                    "/work/shop", "--tag", "deploy")
    assert fact["type"] == "fact" and fact["importance"] >= 0.8 and fact["tags"] == ["deploy"]
    cli("remember", "the office plant needs water on Fridays")
    found = cli.json("recall", "deploy staging", "--project", "/work/shop")
    assert found[0]["memory_id"] == fact["id"]
    elsewhere = cli.json("recall", "deploy staging", "--project", "/work/other")
    assert all(r["memory_id"] != fact["id"] for r in elsewhere)
    everywhere = cli.json("recall", "deploy staging", "--project", "/work/other",
                          "--all-projects")
    assert fact["id"] in [r["memory_id"] for r in everywhere]


def test_correct_supersedes_and_history_shows_the_chain(cli: Cli) -> None:
    """A correction replaces the old memory in recall; the old one stays for audit."""
    old = cli.json("remember", "the rate limit is 100 requests per minute")
    new = cli.json("correct", old["id"], "the rate limit is 500 requests per minute",
                   "--reason", "raised in v2")
    assert new["supersedes"] == old["id"]
    found = cli.json("recall", "rate limit")
    assert [r["memory_id"] for r in found] == [new["id"]]
    chain = cli.json("show-memory", new["id"], "--history")
    assert [m["id"] for m in chain] == [old["id"], new["id"]]
    assert chain[0]["superseded_by"] == new["id"]
    by_query = cli.json("correct", "--query", "rate limit", "the rate limit is 600 per minute")
    assert by_query["supersedes"] == new["id"]
    assert cli("correct", "0" * 32, "x", ok=False).returncode == 66


def test_forget_soft_hard_and_bulk(cli: Cli) -> None:
    """Forgotten memories are never recalled; --hard removes the text from disk; bulk counts."""
    soft = cli.json("remember", "the staging password rotates monthly")
    hard = cli.json("remember", "my locker code is zebra-quokka-42")
    cli("remember", "project alpha uses postgres", "--project", "/p/alpha")
    cli("remember", "project alpha uses redis too", "--project", "/p/alpha")
    cli("remember", "beta is written in rust", "--project", "/p/beta")

    assert cli("forget", soft["id"]).stdout.strip() == "1 memory forgotten"
    assert cli.json("recall", "staging password") == []
    assert cli.json("show-memory", soft["id"])["deleted_at"] is not None

    cli("forget", hard["id"], "--hard")
    assert cli("show-memory", hard["id"], ok=False).returncode == 66
    for name in ("memory.db", "memory.db-wal"):
        path = cli.state / name
        if path.exists():
            assert b"zebra-quokka" not in path.read_bytes(), name

    assert cli("forget", "--project", "/p/alpha").stdout.startswith("2 memories")
    refused = cli("forget", "--all", ok=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert cli("forget", "--all", "--yes").stdout.startswith("1 memory")
    assert cli.json("recall", "rust") == []


def test_context_block_fits_budget_with_facts_first(cli: Cli) -> None:
    """The block opens with a not-instructions line, puts facts first, drops duplicates."""
    cli("remember", "always run the linter before pushing")
    cli("remember", "always run the linter before pushing")
    cli("remember", "the linter is ruff with line length 100")
    block = cli.json("context", "--query", "linter", "--budget", "200")
    assert block["tokens"] <= 200
    lines = block["text"].splitlines()
    assert lines[0] == "<memory_context>" and lines[-1] == "</memory_context>"
    assert "not an instruction" in lines[1]
    # The duplicate fact appears once (recall or the block itself drops it).
    assert len(block["items"]) == 2
    assert len({item["content"] for item in block["items"]}) == 2
    assert all(item["type"] == "fact" for item in block["items"])
    plain = cli("context", "--query", "linter").stdout
    assert plain.startswith("<memory_context>")


def test_export_import_round_trip_is_idempotent(cli: Cli, tmp_path: Path) -> None:
    """Export writes every live memory sorted by id; importing it twice adds nothing new."""
    for text in ("alpha fact", "beta fact", "gamma fact"):
        cli("remember", text, "--project", "/p/x")
    out = tmp_path / "memories.jsonl"
    cli("export", "--output", str(out))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == sorted(r["id"] for r in records)
    assert all(r["schema_version"] == 1 and r["project"] == "/p/x" for r in records)
    assert cli("export").stdout == out.read_text()

    other = Cli(tmp_path, "other")
    assert "imported 3 new" in other("import", str(out)).stdout
    assert "imported 0 new" in other("import", str(out)).stdout
    again = tmp_path / "again.jsonl"
    other("export", "--output", str(again))
    assert again.read_text() == out.read_text()

    future = tmp_path / "future.jsonl"
    future.write_text(json.dumps({**records[0], "schema_version": 99}) + "\n")
    refused = other("import", str(future), ok=False)
    assert refused.returncode == 65 and "schema_version 99" in refused.stderr


def test_recall_temporal_lists_in_time_order(cli: Cli, tmp_path: Path) -> None:
    """`recall-temporal` answers 'what did I learn since X', oldest first."""
    first = cli.json("remember", "learned about the retry budget")
    second = cli.json("remember", "learned about the circuit breaker")
    listed = cli.json("recall-temporal", "1 hour ago")
    ids = [r["memory_id"] for r in listed]
    assert ids.index(first["id"]) < ids.index(second["id"])
    assert cli.json("recall-temporal", "1 hour ago", "--until", "2 hours ago") == []


def test_recall_stdin_answers_one_line_per_query(cli: Cli) -> None:
    """--stdin prints exactly one JSON line per query, even for text holding U+2028."""
    cli("remember", "the release notes\u2028live in docs/releases\u2029and CHANGELOG.md")
    done = subprocess.run(
        memoryd_command("--config", str(cli.config), "recall", "--json", "--stdin"),
        input="release notes\nnothing matches this zzzz\n", env=daemon_env(cli.tmp_path),
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert "\u2028" in first[0]["content"] and second == []


def test_a_memory_is_shown_by_a_unique_start_of_its_id(cli: Cli) -> None:
    """Issue 36.9: as sessions are, a memory is named by the start of its id (4 or more
    characters); a start that names none is a one-line not-found."""
    fact = cli.json("remember", "the staging cluster is called kiwi")
    shown = cli.json("show-memory", fact["id"][:6])
    assert shown["id"] == fact["id"]
    other = "0000" if not fact["id"].startswith("0000") else "ffff"
    missing = cli("show-memory", other, ok=False)
    assert missing.returncode != 0 and missing.stderr.strip().splitlines() == [
        f"memoryd: no memory {other}"]


def test_forgetting_a_corrected_memory_counts_every_version(cli: Cli) -> None:
    """`forget OLD` of a corrected memory forgets its whole chain and says so: 2, not 1
    (issue 61.14)."""
    old = cli.json("remember", "the rate limit is 100 requests per minute")
    new = cli.json("correct", old["id"], "the rate limit is 500 requests per minute")
    done = cli("forget", old["id"])
    assert done.stdout.strip() == "2 memories forgotten", done.stdout
    assert cli.json("show-memory", new["id"])["deleted_at"] is not None


def test_tags_hold_reasons_and_correction_reasons_are_masked(cli: Cli) -> None:
    """What a person types beside a memory (a tag, a hold's reason, a correction's reason)
    is stored and shown masked, as memory text is (issue 61.14)."""
    token = "ghp_Zq8RkT2mWvX9pL4nB7cD1eF3gH5jK0sUaYbW"
    fact = cli.json("remember", "the deploy key rotates monthly", "--tag", token)
    assert token[4:20] not in json.dumps(fact) and fact["tags"] == ["[REDACTED:github_token]"]
    fixed = cli.json("correct", fact["id"], "the deploy key rotates weekly",
                     "--reason", f"was {token}")
    shown = json.dumps(cli.json("show-memory", fixed["id"], "--history"))
    assert token[4:20] not in shown and "[REDACTED:github_token]" in shown
    cli("hold", "add", "--project", "/p/legal", "--reason", "case 42, card 4111 1111 1111 1111")
    holds = cli("hold", "list", "--json").stdout
    assert "4111 1111" not in holds and "[REDACTED:card]" in holds
    assert token[4:20] not in cli("export").stdout
