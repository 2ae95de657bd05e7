"""Recall's rows made `RecallResult` values: rows ranked in SQL, and hybrid recall's hits
(an excerpt of the chunks found, and the messages those chunks hold)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

from memoryd.memory.backends.sqlite.rows import row_provenance
from memoryd.memory.export_format import from_utc_text
from memoryd.memory.models import MemoryType, RecallResult
from memoryd.memory.recall import ranking
from memoryd.memory.recall.hybrid import Found


def ranked_result(row: sqlite3.Row, score: float) -> RecallResult:
    """A row of recall without words, or in time order (`recall.ranked_rows`)."""
    return RecallResult(
        memory_id=row["id"],
        type=MemoryType(row["type"]),
        content=row["content"],
        score=score,
        provenance=row_provenance(row),
        created_at=from_utc_text(row["created_at"]),
        project=row["project"],
        importance=row["importance"],
        tags=tuple(json.loads(row["tags"])),
        relevance=ranking.relevance(row["bm"]),
        private_to=row["private_to"],
    )


def hybrid_result(hit: Found) -> RecallResult:
    """A memory hybrid recall found (`recall.hybrid.rank`)."""
    row = hit.row
    provenance = row_provenance(row)
    excerpt = hit.excerpt
    if excerpt != row["content"]:
        first, last, uuids = hit.provenance_range(
            lambda chunk: json.loads(chunk["message_uuids"]))
        provenance = replace(provenance, first_index=first, last_index=last,
                             message_uuids=uuids)
    return RecallResult(
        memory_id=row["id"],
        type=MemoryType(row["type"]),
        content=row["content"],
        score=hit.score,
        provenance=provenance,
        created_at=from_utc_text(row["created_at"]),
        project=row["project"],
        importance=row["importance"],
        tags=tuple(json.loads(row["tags"])),
        excerpt=None if excerpt == row["content"] else excerpt,
        relevance=hit.relevance,
        private_to=row["private_to"],
        similarity=hit.similarity,
        session_matches=hit.session_matches,
    )
