"""The ONNX Runtime encoder against the NumPy one, on a small random BERT.

Random weights of the real layout (2 layers, 4 heads, hidden 32) exercise every
operation of the graph without the model package, so this runs in CI; the real
model's two runtimes are compared in test_embeddings_local.py.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import structlog

from memoryd.errors import EmbeddingError
from memoryd.memory.embeddings import bert_onnx, local
from memoryd.memory.embeddings.bert import BertConfig, NumpyEncoder, Weights

pytestmark = pytest.mark.skipif(not bert_onnx.available(),
                                reason="onnxruntime and onnx are not installed")

CONFIG = BertConfig(layers=2, heads=4, hidden=32, eps=1e-12)
VOCAB, POSITIONS, INTERMEDIATE = 60, 24, 64


def random_weights(seed: int = 7) -> Weights:
    rng = np.random.default_rng(seed)
    h = CONFIG.hidden

    def normal(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w: Weights = {
        "embeddings.word_embeddings.weight": normal(VOCAB, h, scale=1.0),
        "embeddings.position_embeddings.weight": normal(POSITIONS, h, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(2, h, scale=0.5),
        "embeddings.LayerNorm.weight": 1.0 + normal(h, scale=0.1),
        "embeddings.LayerNorm.bias": normal(h, scale=0.1),
    }
    for i in range(CONFIG.layers):
        p = f"encoder.layer.{i}."
        for name, (out, inp) in {
            "attention.self.query": (h, h), "attention.self.key": (h, h),
            "attention.self.value": (h, h), "attention.output.dense": (h, h),
            "intermediate.dense": (INTERMEDIATE, h), "output.dense": (h, INTERMEDIATE),
        }.items():
            w[p + name + ".weight"] = normal(out, inp)
            w[p + name + ".bias"] = normal(out, scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + norm + ".weight"] = 1.0 + normal(h, scale=0.1)
            w[p + norm + ".bias"] = normal(h, scale=0.1)
    return w


def batch(*lengths: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Token ids padded with 0 to the longest, and the matching mask."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
    mask = np.zeros(ids.shape, dtype=np.float32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, VOCAB, length)
        mask[row, :length] = 1.0
    return ids, mask


@pytest.mark.parametrize("graph", ["plain", "fused"])
def test_onnx_graph_computes_what_numpy_does(graph: bert_onnx.Graph) -> None:
    """Same weights, same tokens: the hidden states agree to float rounding, with ONNX
    Runtime's fused attention and GELU kernels as with the plain graph."""
    weights = random_weights()
    ids, mask = batch(9, 17, 3)
    expected = NumpyEncoder(weights, CONFIG).encode(ids, mask)
    encoder = bert_onnx.OnnxEncoder(weights, CONFIG, threads=1, graph=graph)
    assert encoder.runtime.endswith(" fused") == (graph == "fused")
    got = encoder.encode(ids, mask)
    assert got.shape == expected.shape == (3, 17, CONFIG.hidden)
    real = mask.astype(bool)  # padded positions are never pooled, so only real ones must agree
    assert np.abs(got[real] - expected[real]).max() < 1e-4
    # Not trivially equal: different inputs give different states.
    assert np.abs(expected[0, 0] - expected[1, 0]).max() > 1e-2


def test_int8_graph_stays_close_to_float32() -> None:
    """int8 dense layers: each token's state points where float32's does. (A wrong scale
    axis or zero point gives cosines near 0; this tiny net quantises coarsely, hence 0.95.)"""
    weights = random_weights()
    ids, mask = batch(12, 7)
    exact = bert_onnx.OnnxEncoder(weights, CONFIG, threads=1).encode(ids, mask)
    int8 = bert_onnx.OnnxEncoder(weights, CONFIG, threads=1, graph="int8")
    assert int8.runtime.endswith(" int8")
    approx = int8.encode(ids, mask)
    real = mask.astype(bool)
    a, b = exact[real], approx[real]
    cosines = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosines.min() > 0.95 and cosines.mean() > 0.985
    assert np.abs(a - b).max() > 1e-6  # quantised for real, not the float32 graph again


def test_int8_graph_holds_no_float32_copy_of_the_big_tables() -> None:
    """The int8 graph's word embeddings and dense weights are int8, with float32 scales per
    word and per output channel; only the small tables stay float32."""
    weights = random_weights()
    _, arrays = bert_onnx.build_model(weights, CONFIG, "int8")
    assert "word" not in arrays
    assert arrays["word_q"].dtype == np.int8 and arrays["word_q"].shape == (VOCAB, CONFIG.hidden)
    assert arrays["word_scale"].shape == (VOCAB, 1)
    # Per row: each word's step is its own largest value / 127, so a word of large values
    # does not coarsen the others, and no value is off by more than half a step.
    table = weights["embeddings.word_embeddings.weight"]
    steps = arrays["word_scale"]
    assert np.allclose(steps[:, 0], np.abs(table).max(axis=1) / 127)
    assert steps.min() < steps.max() / 1.5  # rows differ: one global step would not fit all
    restored = arrays["word_q"].astype(np.float32) * steps
    assert (np.abs(restored - table) <= steps / 2 + 1e-6).all()
    dense = [a for name, a in arrays.items() if name.endswith(".weight_q")]
    assert len(dense) == 6 * CONFIG.layers and all(a.dtype == np.int8 for a in dense)


@pytest.mark.parametrize("graph", ["plain", "fused"])
def test_padding_does_not_change_a_sequence(graph: bert_onnx.Graph) -> None:
    """A sequence's states are the same alone and padded in a batch with a longer one."""
    encoder = bert_onnx.OnnxEncoder(random_weights(), CONFIG, threads=1, graph=graph)
    ids, mask = batch(5, 20)
    together = encoder.encode(ids, mask)
    alone = encoder.encode(ids[:1, :5], mask[:1, :5])
    assert np.abs(together[0, :5] - alone[0]).max() < 1e-5


def test_auto_falls_back_to_numpy_when_onnx_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model ONNX Runtime rejects: `auto` logs and uses NumPy; `onnx` is a clear error."""
    monkeypatch.setattr(bert_onnx, "build_model", lambda *args, **kwargs: (b"not a model", {}))
    with structlog.testing.capture_logs() as logs:
        encoder = local.make_encoder(random_weights(), CONFIG, "auto")
    assert encoder.runtime == "numpy"
    assert [e["event"] for e in logs] == ["embeddings_runtime_fallback"]
    with pytest.raises(EmbeddingError, match="ONNX Runtime"):
        local.make_encoder(random_weights(), CONFIG, "onnx")


def test_fused_kernels_missing_fall_back_to_the_plain_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ONNX Runtime without the fused kernels (a graph it rejects): the plain graph,
    said once in the log; it computes the same states."""
    build = bert_onnx.build_model

    def without_fused(weights: object, config: object, graph: str = "plain") -> object:
        return (b"not a model", {}) if graph == "fused" else build(
            weights, config, graph)  # type: ignore[arg-type]

    monkeypatch.setattr(bert_onnx, "build_model", without_fused)
    with structlog.testing.capture_logs() as logs:
        encoder = local.make_encoder(random_weights(), CONFIG, "auto", "fused")
    assert encoder.runtime.startswith("onnxruntime ") and not encoder.runtime.endswith("fused")
    assert [e["event"] for e in logs] == ["embeddings_fused_kernels_unavailable"]


def test_runtime_choice() -> None:
    """`numpy` is NumPy; `auto` and `onnx` are ONNX Runtime when it is installed."""
    weights = random_weights()
    assert local.make_encoder(weights, CONFIG, "numpy").runtime == "numpy"
    assert local.make_encoder(weights, CONFIG, "auto").runtime.startswith("onnxruntime ")
    assert local.runtime_name() == "onnxruntime"


def _write_model(directory: Path) -> list[str]:
    """A tiny model directory as the weights package lays it out (one layer, the real
    width of 384 that `LocalEmbedder` pools to), and the words its tokenizer knows."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    config = BertConfig(layers=1, heads=12, hidden=384, eps=1e-12)
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(40)]
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3,
             **{w: i + 4 for i, w in enumerate(words)}}
    h, inner = config.hidden, 4 * config.hidden
    shapes = {"embeddings.word_embeddings.weight": (len(vocab), h),
              "embeddings.position_embeddings.weight": (64, h),
              "embeddings.token_type_embeddings.weight": (2, h),
              "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,)}
    p = "encoder.layer.0."
    for name, (out, inp) in {"attention.self.query": (h, h), "attention.self.key": (h, h),
                             "attention.self.value": (h, h), "attention.output.dense": (h, h),
                             "intermediate.dense": (inner, h),
                             "output.dense": (h, inner)}.items():
        shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (out, inp), (out,)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
        shapes[p + norm + ".weight"], shapes[p + norm + ".bias"] = (h,), (h,)
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, shape in shapes.items():
        array = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        if name.endswith("LayerNorm.weight"):
            array += 1.0
        blobs.append(array.tobytes())
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(blobs[-1])]}
        offset += len(blobs[-1])
    head = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (directory / "config.json").write_text(json.dumps({
        "num_hidden_layers": config.layers, "num_attention_heads": config.heads,
        "hidden_size": config.hidden}))
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.save(str(directory / "tokenizer.json"))
    return words


@pytest.mark.parametrize(("precision", "graph"), [("float32", "fused"), ("int8", "int8")])
def test_background_batches_give_each_text_its_own_vector(tmp_path: Path, precision: str,
                                                          graph: str) -> None:
    """Texts of many lengths, embedded in runs of like length on the background threads
    (padded, longest first, pooled on the caller's thread): each comes back in its place
    with the vector it has alone: through the NumPy encoder for float32, through the same
    model for int8 (each token quantised on its own scale: a text's vector does not depend
    on the texts batched with it)."""
    words = _write_model(tmp_path)
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 40, 23)]
    model = local.LocalEmbedder(tmp_path, "auto", precision)  # type: ignore[arg-type]
    alone = local.LocalEmbedder(tmp_path, "numpy") if precision == "float32" else model
    try:
        assert model.yields_cores and model.runtime.endswith(f" {graph}")
        together = model.embed(texts)
        assert together.shape == (len(texts), 384)
        for text, vector in zip(texts, together, strict=True):
            assert np.abs(vector - alone.embed([text])[0]).max() < 1e-4
        assert np.abs(together[0] - together[1]).max() > 1e-3  # not one vector for all
    finally:
        model.close()
        alone.close()
