"""The answer asked of the model, and what of it may become memory.

`{"items": [{"type", "content", "evidence": [message numbers]}]}`, validated with
pydantic: an answer of another shape is refused (and asked again once). Only items of
the four kinds, with some content and resting on messages of
the segment (numbered from 0), are kept; an item citing a message outside the segment
is dropped. Anything else in the answer (prose, other keys, instructions) is ignored:
what a model says can only ever become schema-valid items, never an action.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from memoryd.errors import DistillAnswerError

#: Items kept from one segment's answer, at most.
MAX_ITEMS = 12
#: Characters of an item's content, at most (an observation is a sentence or two).
MAX_CONTENT = 400

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.S)


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["fact", "decision", "preference", "gotcha"]
    content: str = Field(min_length=1, max_length=4000)
    evidence: list[StrictInt] = Field(min_length=1, max_length=200)
    replaces: str | None = Field(default=None, max_length=40)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Checked one by one: an item of another kind, or without evidence, is dropped, not
    # the whole answer.
    items: list[Any] = Field(max_length=200)


@dataclass(frozen=True, slots=True)
class Item:
    """One observation, resting on messages `evidence` (numbers within the segment)."""

    kind: str
    content: str
    evidence: tuple[int, ...]
    #: What it replaces: a key of the prompt's known lines, then the memory's id.
    replaces: str | None = None


def parse_answer(text: str, shown: int | Collection[int], *, provider: str,
                 known: Collection[str] = ()) -> list[Item]:
    """The items of a model's `text` about a segment whose messages `shown` (their
    numbers, or how many from 0) were in the prompt; an item citing another is dropped,
    whether the segment does not hold it or the prompt left it out. Raises
    DistillAnswerError when it is not JSON of the schema (the caller retries once). An
    item's `replaces` is kept only when it is one of the `known` keys."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    if not body.startswith("{") and "{" in body and "}" in body:
        # An agent CLI's model may say a word before or after the object.
        body = body[body.index("{"):body.rindex("}") + 1]
    try:
        answer = _Answer.model_validate(json.loads(body))
    except (ValueError, ValidationError, RecursionError) as exc:
        # The reason only: the answer may hold the conversation's text.
        kind = "not JSON" if isinstance(exc, json.JSONDecodeError) else (
            "not the schema asked for")
        raise DistillAnswerError(f"the answer is {kind}", provider=provider) from None
    cited = range(shown) if isinstance(shown, int) else shown
    items: list[Item] = []
    seen: set[tuple[str, str]] = set()
    for candidate in answer.items:
        try:
            raw = _Item.model_validate(candidate)
        except ValidationError:
            continue
        content = " ".join(raw.content.split())
        if not content or any(n not in cited for n in raw.evidence):
            continue  # cites what the model was not shown: not evidence
        if len(content) > MAX_CONTENT:
            content = content[:MAX_CONTENT - 1].rstrip() + "…"
        key = (raw.type, content.casefold())
        if key in seen:
            continue
        seen.add(key)
        items.append(Item(raw.type, content, tuple(sorted(set(raw.evidence))),
                          raw.replaces if raw.replaces in known else None))
        if len(items) == MAX_ITEMS:
            break
    return items


def encode_items(items: list[Item]) -> str:
    """The checked items as the queue keeps them until they are stored."""
    return json.dumps([{"type": i.kind, "content": i.content, "evidence": list(i.evidence),
                        "replaces": i.replaces} for i in items], ensure_ascii=False)


def decode_items(text: str) -> list[Item]:
    return [Item(i["type"], i["content"], tuple(i["evidence"]), i.get("replaces"))
            for i in json.loads(text)]
