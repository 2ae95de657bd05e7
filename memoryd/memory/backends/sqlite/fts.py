"""Turning user text into a safe FTS5 query.

FTS5 has its own query language (`AND`, `OR`, `NOT`, `NEAR`, quotes, parentheses,
`column:` filters, `*` prefixes, `^`). User text such as `what's "the" deploy-order?`
or `AND OR (` must never be parsed as syntax, so the query is rebuilt from its
words: each word is quoted as a string literal and the words are OR-ed, leaving
BM25 to reward memories that match more, and rarer, words. Common English words
are dropped when other words remain, so that "what is the deploy order" does not
match every memory that contains "the".
"""

from __future__ import annotations

from memoryd.memory.recall.words import MAX_TERMS, terms

__all__ = ["MAX_TERMS", "match_expression", "terms"]

def match_expression(text: str, *, content_only: bool = False) -> str | None:
    """An FTS5 MATCH expression for `text`, or None when it holds no words at all.

    `content_only` confines the words to the `content` column (the chunk index,
    whose second column holds scope tokens that words must never match).
    """
    words = terms(text)
    if not words:
        return None
    either = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    return f"{{content}} : ({either})" if content_only else either
