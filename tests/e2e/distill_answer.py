"""What the fake model servers answer when memoryd asks an agent CLI to distil a segment
(the story's last step): one decision, resting on the segment's first message."""

from __future__ import annotations

import json
from typing import Any

#: Where memoryd's distillation prompt shows in a request body (its instructions).
MARK = "You read one excerpt of a conversation"
DISTILLED = "Refunds go through the ledger service, never straight to the PSP."
ANSWER = json.dumps({"items": [{"type": "decision", "content": DISTILLED, "evidence": [0]}]})


def asks_to_distill(body: Any) -> bool:
    return MARK in json.dumps(body)
