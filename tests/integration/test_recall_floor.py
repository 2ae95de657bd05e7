"""Recall as a new user meets it (issue 37): one result a session, nothing below the floor.

A real daemon embeds through the `openai` provider against a real HTTP server on
127.0.0.1 whose vectors are bags of words (each word hashed to a dimension), so texts
that share no word are orthogonal, as unrelated texts are under a real model, and the
vector channel still hands recall its best candidates whatever they say.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import JsonHandler, wait_for
from test_agents import PROJECT, Daemon, claude_line, claude_payload, context_of, quick_daemon

DIMENSIONS = 384


def bag_of_words(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z]{3,}", text.lower()):
        slot = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big") % DIMENSIONS
        vector[slot] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class WordEmbeddings(JsonHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        self.send_json({"data": [{"index": i, "embedding": bag_of_words(text)}
                                 for i, text in enumerate(body["input"])]})


@contextmanager
def embedding_daemon(tmp_path: Path, **memory: Any) -> Iterator[Daemon]:
    """A started daemon embedding bags of words, with `memory` settings on top."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), WordEmbeddings)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    embeddings = {"provider": "openai", "openai": {
        "base_url": f"http://127.0.0.1:{httpd.server_address[1]}/v1",
        "dimensions": DIMENSIONS, "api_key_env": "EMBED_TEST_KEY"}}
    try:
        with quick_daemon(tmp_path, memory={"embeddings": embeddings, **memory}) as found:
            found.env["EMBED_TEST_KEY"] = "sk-test-never-shown"
            found.start()
            yield found
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    with embedding_daemon(tmp_path) as found:
        yield found


def recall(daemon: Daemon, query: str, *extra: str) -> list[dict[str, Any]]:
    done = daemon.cli("recall", query, "--json", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def embedded(daemon: Daemon) -> bool:
    memory = json.loads(daemon.cli("status", "--json").stdout)["memory"]
    return memory["embedder"] is not None and memory["chunks_waiting_for_vector"] == 0


def test_a_stores_first_fact_is_found_at_a_score_that_says_so(daemon: Daemon) -> None:
    """In a store of one memory FTS5 weighs no word (each is in half or more of the
    chunks): the vectors rank, and the fact's own words score it high, not 0.08."""
    fact = json.loads(daemon.cli("remember", "deploy order: staging first, then production",
                                 "--project", "/work/shop", "--json").stdout)
    wait_for(lambda: embedded(daemon), timeout=60, what="the fact embedded")
    found = recall(daemon, "deploy order staging", "--project", "/work/shop")
    assert [r["memory_id"] for r in found] == [fact["id"]]
    assert found[0]["score"] > 0.4, found[0]


def test_keywords_alone_score_a_stores_first_facts_by_their_words(tmp_path: Path) -> None:
    """Keywords alone (no embedder), one or two memories: FTS5 weighs no word, and each
    fact scored 0.000 for its own words; the share of the query's words it holds ranks
    and scores it instead."""
    with quick_daemon(tmp_path, memory={"embeddings": {"provider": "none"}}) as daemon:
        daemon.start()
        deploy = json.loads(daemon.cli(
            "remember", "deploy order: staging first, then canary, then production",
            "--json").stdout)
        found = recall(daemon, "deploy order staging")
        assert [r["memory_id"] for r in found] == [deploy["id"]]
        assert found[0]["score"] > 0.4, found[0]
        migrate = json.loads(daemon.cli(
            "remember", "database migrations: staging runs alembic upgrade head", "--json").stdout)
        found = recall(daemon, "alembic migrations on staging")
        # The other fact holds one of three words: found, and scored below the first.
        assert [r["memory_id"] for r in found] == [migrate["id"], deploy["id"]]
        assert found[0]["score"] > 0.4, found
        assert found[1]["score"] < found[0]["score"] / 2, found


def test_a_new_users_recall_returns_the_fact_and_nothing_unrelated(daemon: Daemon) -> None:
    """`recall "deploy order staging"` gives the fact, not nine unrelated memories scored
    down to 0.005 (the vector channel's leftovers); a project with no memory of the
    subject gets nothing, said in one line."""
    fact = json.loads(daemon.cli("remember", "deploy order: staging first, then production",
                                 "--project", "/work/shop", "--json").stdout)
    for text in ("the office plant needs water on Fridays", "lunch is at noon in the big room",
                 "the printer on floor two is broken"):
        daemon.cli("remember", text, "--project", "/work/shop")
    for text in ("user: Hello assistant: Hi!", "rotate the on-call schedule every Monday"):
        daemon.cli("remember", text)  # global: recalled from every project
    wait_for(lambda: embedded(daemon), timeout=60, what="every memory embedded")
    found = recall(daemon, "deploy order staging", "--project", "/work/shop")
    assert [r["memory_id"] for r in found] == [fact["id"]]
    assert found[0]["similarity"] > 0.5
    assert recall(daemon, "kubernetes autoscaler thresholds", "--project", "/work/shop") == []
    said = daemon.cli("recall", "kubernetes autoscaler thresholds", "--project", "/work/shop")
    assert said.returncode == 0
    assert said.stdout == "nothing in memory is relevant to this query\n"
    # A project with no memory of its own: the global ones are candidates, none relevant.
    assert recall(daemon, "deploy order staging", "--project", "/work/empty") == []
    assert [r["content"] for r in recall(daemon, "on-call schedule", "--project",
                                         "/work/empty")] == [
        "rotate the on-call schedule every Monday"]


def test_a_long_session_comes_back_once(daemon: Daemon) -> None:
    """A session saved as several segments and a digest is one result, its best, counting
    the others; the next session is the second result instead of the first one's tail."""
    start = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    folder = daemon.claude_root / PROJECT.replace("/", "-")
    folder.mkdir(parents=True)
    long_lines = []
    for i in range(60):
        role = "user" if i % 2 == 0 else "assistant"
        long_lines.append(claude_line(
            "s-long", f"l{i}", role,
            f"the nginx reload on staging failed again, attempt {i} " + "padding " * 60,
            start + timedelta(seconds=30 * i)))
    (folder / "s-long.jsonl").write_text("".join(long_lines))
    (folder / "s-short.jsonl").write_text("".join([
        claude_line("s-short", "s0", "user", "why does the nginx reload need sudo",
                    start + timedelta(hours=2)),
        claude_line("s-short", "s1", "assistant", "the nginx reload needs root for port 80",
                    start + timedelta(hours=2, seconds=30))]))
    done = daemon.cli("sync")
    assert done.returncode == 0, done.stderr

    def saved() -> bool:
        rows = recall(daemon, "nginx reload", "--project", PROJECT, "--type",
                      "conversation", "--limit", "50")
        return {r["provenance"]["session_external_id"] for r in rows} == {"s-long", "s-short"}

    wait_for(saved, timeout=60, what="both sessions saved")
    wait_for(lambda: embedded(daemon), timeout=60, what="every memory embedded")
    found = recall(daemon, "nginx reload staging", "--project", PROJECT)
    sessions = [r["provenance"]["session_external_id"] for r in found]
    assert sorted(sessions) == ["s-long", "s-short"]
    long_one = found[sessions.index("s-long")]
    assert long_one["session_matches"] >= 3  # its segments and its digest


IMPORTER_SESSIONS = {"s-60": ("csv", 60), "s-7": ("json", 7), "s-1": ("yaml", 1)}


def importer_sessions(daemon: Daemon) -> datetime:
    """Three sessions fixing one importer, 60, 7 and 1 days ago, saved and embedded; now."""
    now = datetime.now(UTC)
    folder = daemon.claude_root / PROJECT.replace("/", "-")
    folder.mkdir(parents=True)
    for session, (kind, days) in IMPORTER_SESSIONS.items():
        when = now - timedelta(days=days)
        (folder / f"{session}.jsonl").write_text("".join([
            claude_line(session, f"{session}-0", "user",
                        f"the {kind} importer drops the timezone of dates, fix it", when),
            claude_line(session, f"{session}-1", "assistant",
                        f"fixed the {kind} importer: dates keep their timezone",
                        when + timedelta(seconds=30))]))
    done = daemon.cli("sync")
    assert done.returncode == 0, done.stderr

    def saved() -> bool:
        rows = recall(daemon, "importer timezone", "--project", PROJECT, "--limit", "50")
        return {r["provenance"]["session_external_id"] for r in rows} == set(IMPORTER_SESSIONS)

    wait_for(saved, timeout=60, what="the three sessions saved")
    wait_for(lambda: embedded(daemon), timeout=60, what="every memory embedded")
    return now


def first_session(daemon: Daemon, query: str, *extra: str) -> str:
    found = recall(daemon, query, "--project", PROJECT, *extra)
    assert found, query
    return found[0]["provenance"]["session_external_id"]  # type: ignore[no-any-return]


def test_a_time_in_the_query_finds_that_times_session(daemon: Daemon) -> None:
    """"what did we change in the importer a week ago" finds last week's session before a
    newer one that matches as well; a query that is only a time ("what did we do
    yesterday?") finds that day's session; `--as-of` reads the words as said then."""
    now = importer_sessions(daemon)

    def first(query: str, *extra: str) -> str:
        return first_session(daemon, query, *extra)

    # Without a time the newest leads (as well matched, less faded).
    assert first("what did we change in the importer for timezones") == "s-1"
    assert first("what did we change in the importer for timezones a week ago") == "s-7"
    assert first("what did we change in the importer for timezones two months ago") == \
        "s-60"
    only_time = recall(daemon, "what did we do yesterday?", "--project", PROJECT)
    assert only_time
    assert {r["provenance"]["session_external_id"] for r in only_time} == {"s-1"}
    # The prompt hook as an agent calls it: the time's memories pass its gate.
    given = context_of(daemon.hook("claude", "UserPromptSubmit", claude_payload(
        "UserPromptSubmit", "c-time", prompt="what did we do yesterday?")))
    assert given is not None
    assert "yaml importer" in given
    assert "json importer" not in given and "csv importer" not in given
    # Asked as if six days ago, "yesterday" is the week-old session's day.
    six_days_ago = (now - timedelta(days=6)).isoformat()
    assert first("what did we change in the importer yesterday", "--as-of",
                 six_days_ago) == "s-7"


_IMPORTER_SCORES = {"yaml importer": 0.8, "json importer": 0.6, "csv importer": 0.4}


class ImporterReranker(JsonHandler):
    """A stand-in cross-encoder: it prefers the newest importer's text, as a reranker that
    reads only texts prefers whatever matches best, whenever it was said."""

    def do_POST(self) -> None:
        body = self.read_json()
        scores = [max((s for words, s in _IMPORTER_SCORES.items() if words in document),
                      default=0.1) for document in body["documents"]]
        self.send_json({"results": [{"index": i, "relevance_score": s}
                                    for i, s in enumerate(scores)]})


def test_a_reranker_keeps_the_time_the_query_speaks_of(tmp_path: Path) -> None:
    """With a reranker configured, "a week ago" still finds last week's session: the
    reranker's scores are weighed by the time as recall's own are."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ImporterReranker)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    rerank = {"provider": "http", "base_url": f"http://127.0.0.1:{httpd.server_address[1]}"}
    try:
        with embedding_daemon(tmp_path, rerank=rerank) as daemon:
            importer_sessions(daemon)
            assert first_session(daemon, "what did we change in the importer") == "s-1"
            assert first_session(daemon, "what did we change in the importer a week ago") \
                == "s-7"
            # The reranker has its say: 0.4 weighed up is still below 0.8 (without it,
            # recall finds the session of two months ago, as the test above asserts).
            assert first_session(
                daemon, "what did we change in the importer two months ago") == "s-1"
    finally:
        httpd.shutdown()
        httpd.server_close()
