"""The embedder interface: text in, L2-normalised float32 vectors out.

Errors, drawn once:

    BackendError                      (memoryd.errors)
    └── EmbeddingError                 an embedder failed; carries `provider`, never a key
        └── EmbeddingUnavailable       transient (429, 5xx, timeout, refused): try again later
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors: TypeAlias = npt.NDArray[np.float32]
else:  # NumPy loads with the first embedder that runs; the name is only an annotation
    Vectors = Any


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of `dimensions` floats; `name` identifies the model."""

    name: str
    dimensions: int
    #: True when `embed` computes on this machine's processor rather than waiting on a
    #: network: recall then embeds the query before its SQL, not beside it.
    on_this_machine: bool

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text (blocking: call it off the event loop)."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """A recall query's unit vector, comparable with `embed`'s (blocking, like it)."""
        ...


def normalise(vectors: npt.NDArray[np.floating]) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero)."""
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    out: Vectors = (array / np.maximum(norms, 1e-12)).astype(np.float32)
    return out
