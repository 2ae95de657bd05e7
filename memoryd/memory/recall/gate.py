"""Whether a recalled memory is worth injecting for a prompt: query-term coverage.

Recall always returns its best matches, however weak; a hook that injected them
all would put noise in front of the model on every prompt. BM25 scores do not
say "relevant" on an absolute scale (FTS5's IDF is near zero in a small store,
and grows with the store), so the gate asks something that means the same at
any size: how much of what the prompt asks about does the memory mention?

    coverage = matched content words / expected, in [0, 1]
    expected = n for n <= SHORT, else SHORT + (n - SHORT) / 4

Content words are the prompt's words less stopwords and conversational filler
("please", "tell", "remind"); a memory word matches a prompt word when they are
equal or share a stem of at least STEM characters ("deploying" ~ "deployment").
Long prompts do not need every word matched: past SHORT words each counts a
quarter. `agents.prompt_min_relevance` is the threshold (calibrated in
docs/performance.md).
"""

from __future__ import annotations

import re

from memoryd.memory.recall.words import STOPWORDS

SHORT = 6
STEM = 5

_WORD = re.compile(r"\w+", re.UNICODE)
_FILLER = frozenset({
    "about", "again", "all", "also", "any", "anything", "can", "could", "does", "done",
    "doing", "get", "give", "going", "good", "hello", "help", "here", "hey", "hi", "just",
    "know", "let", "like", "look", "make", "many", "more", "much", "need", "now", "ok",
    "okay", "one", "please", "remember", "remind", "say", "see", "should", "some", "tell",
    "thanks", "thank", "think", "try", "us", "use", "want", "way", "well", "would", "yes",
    "am", "been", "being", "into", "out", "up", "very", "than", "too", "only", "other",
})


def content_words(text: str) -> list[str]:
    """The distinct words of `text` that carry meaning, lower-cased."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) > 1 and word not in STOPWORDS and word not in _FILLER:
            seen.setdefault(word, None)
    return list(seen)


def _stem(word: str) -> str:
    return word[:STEM] if len(word) >= STEM else word


#: What memoryd itself writes into a memory's text: a line's speaker (`user:`, `assistant
#: used`), a digest's heading (the agent, the session, the path it ran in) and its part
#: labels. None of it is what the memory says: a query's "user" or "work" must not find
#: every segment by its labels or every digest by its path.
_LABELS = re.compile(
    r"(?m)^(?:(?:user|assistant|tool)(?: thought| used| failed)?:? "
    r"|\S+ session \S+ in .*$"
    r"|(?:Title|Asked|Changed|Ran|Committed|Concluded|Open|Left unanswered): )")


def coverage(prompt: str, text: str) -> float:
    """How much of the prompt's content `text` mentions, in [0, 1] (0 for no content words)."""
    wanted = content_words(prompt)
    if not wanted:
        return 0.0
    text = _LABELS.sub(" ", text)
    # A file's name is words too: `terminal_channel.ex` mentions the terminal channel.
    present = {_stem(part) for w in content_words(text) for part in (w, *w.split("_"))
               if part}
    matched = sum(1 for w in wanted if _stem(w) in present)
    n = len(wanted)
    expected = n if n <= SHORT else SHORT + (n - SHORT) / 4
    return min(1.0, matched / expected)


#: The relevance floor of recall (CLI, MCP, API): a result is returned only when it
#: mentions at least MIN_COVERAGE of the query's content words, or is close to it in
#: meaning (cosine >= `memory.embeddings.min_similarity`, MIN_SIMILARITY by default, on
#: all-MiniLM-L6-v2's scale). What it drops is the
#: vector channel's leftovers, which hybrid recall ranks low but returns: memories that
#: share no word with the query and little meaning. Calibrated in docs/performance.md
#: (issue 37): on LoCoMo and LongMemEval-dev it drops no result holding evidence in the
#: top 10. No floor relative to the best result: BM25 scores a long text that holds every
#: query word at a fraction of a short one's.
MIN_COVERAGE = 0.2
MIN_SIMILARITY = 0.3


def above_floor(query: str, text: str, similarity: float | None,
                min_similarity: float = MIN_SIMILARITY) -> bool:
    """Whether a recalled text is worth returning for `query` (see MIN_COVERAGE)."""
    if similarity is not None and similarity >= min_similarity:
        return True
    return coverage(query, text) >= MIN_COVERAGE
