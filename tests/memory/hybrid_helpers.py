"""A fake embedder with known vectors, for hybrid recall tests that need no model."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

from memoryd.memory.embeddings.interface import Vectors, normalise

# Words that mean the same share an axis: the fake "understands" paraphrases.
CONCEPTS: list[tuple[str, ...]] = [
    ("deploy", "deployment", "release", "ship", "rollout"),
    ("staging", "preprod", "canary"),
    ("production", "prod", "live"),
    ("order", "sequence", "first", "before", "after"),
    ("database", "postgres", "sqlite", "db"),
    ("coffee", "espresso", "latte"),
    ("cat", "kitten", "feline"),
    ("painting", "canvas", "art"),
]
SPARE = 16  # axes for other words, by hash, so unrelated texts are not all alike
DIMENSIONS = len(CONCEPTS) + SPARE
_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Text -> the normalised count of each concept's words; other words weigh 0.2 on a spare
    axis picked by their CRC32."""

    name = "fake:concepts"
    dimensions = DIMENSIONS

    def __init__(self, *, on_this_machine: bool = True) -> None:
        self.on_this_machine = on_this_machine
        self.calls = 0
        self.fail = False

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.fail:
            from memoryd.memory.embeddings import EmbeddingUnavailable

            raise EmbeddingUnavailable("fake outage", provider="fake")
        self.calls += 1
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                axis = next((i for i, group in enumerate(CONCEPTS) if word in group), None)
                if axis is None:
                    out[row, len(CONCEPTS) + zlib.crc32(word.encode()) % SPARE] += 0.2
                else:
                    out[row, axis] += 1.0
        return normalise(out)

    def embed_query(self, text: str) -> Vectors:
        vector: Vectors = self.embed([text])[0]
        return vector
