"""A BERT encoder (the kind all-MiniLM-L6-v2 is) written out in NumPy.

`NumpyEncoder` is the reference forward pass: the embeddings (word + position +
token type 0, LayerNorm), then per layer multi-head self-attention and a GELU
feed-forward block, each with a residual connection and post-LayerNorm. It
returns the last hidden states; pooling is the caller's. `bert_onnx` builds the
same network as an ONNX graph for ONNX Runtime, and is tested against this one.

Weights are named as in Hugging Face's `BertModel` state dict
(`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Weights = dict[str, npt.NDArray[Any]]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


@dataclass(frozen=True)
class BertConfig:
    """The shape of the network, from the model's `config.json`."""

    layers: int
    heads: int
    hidden: int
    eps: float = 1e-12

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        raw = json.loads(path.read_text())
        return cls(layers=int(raw["num_hidden_layers"]), heads=int(raw["num_attention_heads"]),
                   hidden=int(raw["hidden_size"]), eps=float(raw.get("layer_norm_eps", 1e-12)))


class Encoder(Protocol):
    """Token ids and their mask in, last hidden states out."""

    runtime: str

    def encode(self, ids: I64, mask: F32) -> F32:
        """`ids` and `mask` are (batch, seq); the result is (batch, seq, hidden)."""
        ...


def read_safetensors(path: Path) -> Weights:
    """Every tensor of a .safetensors file as a NumPy array (no torch, no safetensors package).

    The format is an 8-byte header length, a JSON header, then raw little-endian arrays.
    """
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    base = 8 + size
    tensors: Weights = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        array = np.frombuffer(data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize,
                              offset=base + start)
        tensors[name] = array.reshape(info["shape"])
    return tensors


def mask_bias(mask: F32) -> F32:
    """The additive attention mask: 0 over real tokens, -1e9 over padding, (batch, 1, 1, seq)."""
    out: F32 = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :].astype(np.float32, copy=False)
    return out


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


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32, copy=False)
    return out


def f32(array: npt.NDArray[Any]) -> F32:
    """A contiguous float32 copy-or-view of a weight."""
    return np.ascontiguousarray(array, dtype=np.float32)


class _Layer:
    def __init__(self, w: Weights, prefix: str, eps: float) -> None:
        def get(name: str) -> F32:
            return f32(w[prefix + name])

        self.eps = eps
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

    def __call__(self, x: F32, bias: F32, heads: int) -> F32:
        batch, seq, hidden = x.shape
        width = hidden // heads
        flat = x.reshape(-1, hidden)  # 2-D products: BLAS runs them much faster than 3-D ones
        qkv = (flat @ self.qkv_w + self.qkv_b).reshape(batch, seq, 3, heads, width)
        # Contiguous copies: NumPy's stacked matmul falls back to a slow loop on strided views.
        qkv = np.ascontiguousarray(qkv.transpose(2, 0, 3, 1, 4))
        q, v = qkv[0], qkv[2]
        k_t = np.ascontiguousarray(qkv[1].transpose(0, 1, 3, 2))
        scores = (q @ k_t) * np.float32(1.0 / math.sqrt(width)) + bias
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        context = np.ascontiguousarray((probs @ v).transpose(0, 2, 1, 3)).reshape(-1, hidden)
        flat = _layer_norm(context @ self.out_w + self.out_b + flat, *self.ln1, eps=self.eps)
        up = _gelu(flat @ self.up_w + self.up_b)
        out = _layer_norm(up @ self.down_w + self.down_b + flat, *self.ln2, eps=self.eps)
        return out.reshape(batch, seq, hidden)


class NumpyEncoder:
    """The forward pass in NumPy: no runtime beyond NumPy's BLAS."""

    runtime = "numpy"

    def __init__(self, weights: Weights, config: BertConfig) -> None:
        self._config = config
        self._word = f32(weights["embeddings.word_embeddings.weight"])
        self._position = f32(weights["embeddings.position_embeddings.weight"])
        self._token_type = f32(weights["embeddings.token_type_embeddings.weight"][0])
        self._ln = (f32(weights["embeddings.LayerNorm.weight"]),
                    f32(weights["embeddings.LayerNorm.bias"]))
        self._layers = [_Layer(weights, f"encoder.layer.{i}.", config.eps)
                        for i in range(config.layers)]

    def encode(self, ids: I64, mask: F32) -> F32:
        length = ids.shape[1]
        x = self._word[ids] + self._position[:length] + self._token_type
        x = _layer_norm(x.astype(np.float32, copy=False), *self._ln, eps=self._config.eps)
        bias = mask_bias(mask)
        for layer in self._layers:
            x = layer(x, bias, self._config.heads)
        return x
