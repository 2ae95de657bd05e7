"""The BERT encoder of `bert` as an ONNX graph, run by ONNX Runtime.

Same weights, same arithmetic (float32 throughout, exact GELU through Erf), so
the vectors match the NumPy pass to float rounding and stored vectors stay
valid whichever runtime made them. What ONNX Runtime adds is speed: it packs
the weight matrices once when the session starts, where NumPy's BLAS repacks
them on every product, and it fuses LayerNorm, GELU and attention. A one-line
query embeds in about half the time, which is most of a hybrid recall's budget.

The graph is built in memory at load (under a second), so nothing but the
weights package is shipped or cached on disk. The weights do not go through
the protobuf: the graph names them as external data, and the session copies
them in from the arrays (`add_external_initializers`). That keeps the load's
peak memory at about the model's size over NumPy's, not three copies.
"""

from __future__ import annotations

import math
import os
from importlib.util import find_spec
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memoryd.errors import EmbeddingError
from memoryd.memory.embeddings.bert import F32, I64, BertConfig, Weights, f32, mask_bias

# Opset 17 has LayerNormalization; ONNX Runtime 1.14 and later run it.
OPSET = 17
# A daemon shares the machine: a few threads are enough for a query or a batch
# of chunks, and idle threads must sleep, not spin, between calls.
MAX_THREADS = 4
#: Which graph: float32 as written; float32 through ONNX Runtime's own attention and
#: GELU kernels; or int8 dense layers. One choice, so no caller can ask for two.
Graph = Literal["plain", "fused", "int8"]


def available() -> bool:
    """True when ONNX Runtime and the `onnx` graph builder are both importable."""
    return find_spec("onnxruntime") is not None and find_spec("onnx") is not None


def _quantise_rows(table: npt.NDArray[Any], block: int = 2048,
                   ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Symmetric int8 per row (scale = max |row| / 127), a block of rows at a time, so the
    float temporaries of a 47 MB table stay a few MB rather than several times its size."""
    quantised = np.empty(table.shape, dtype=np.int8)
    scale = np.empty((table.shape[0], 1), dtype=np.float32)
    for start in range(0, table.shape[0], block):
        rows = f32(table[start:start + block])
        step = np.maximum(np.abs(rows).max(axis=1, keepdims=True), 1e-12) / np.float32(127.0)
        quantised[start:start + block] = np.clip(np.rint(rows / step), -127, 127)
        scale[start:start + block] = step
    return quantised, scale


def build_model(weights: Weights, config: BertConfig, graph: Graph = "plain",
                ) -> tuple[bytes, dict[str, npt.NDArray[Any]]]:
    """The serialised ONNX graph (ids, positions and mask in, hidden states out), and
    the weight arrays it names, to be handed to the session as they are.

    With "fused", each layer's attention is ONNX Runtime's own
    `Attention` kernel (com.microsoft: Q, K and V in one product, the mask as 0/1 per
    token) and its GELU is `BiasGelu`, in the bias add: the same arithmetic in fewer,
    larger steps (vectors equal to float rounding, 5-10 % faster).

    With "int8", the dense layers' weights are quantised per output channel
    (symmetric, scale = max |w| / 127) and their inputs per token, as they come (the
    same symmetric rule, stored as uint8 about 128): the layers' weights shrink from
    42 to 11 MB, which stays in a desktop's L3 cache, and a text's vector does not
    depend on the texts it is batched with.
    The word embeddings are quantised per row (47 -> 12 MB); a query reads only
    its own few rows of them, so this saves memory rather than time.
    """
    return _Graph(weights, config, graph).build()


class _Graph:
    """One graph under construction: its nodes, its small constants, and the weight
    arrays it names as external data."""

    def __init__(self, weights: Weights, config: BertConfig, graph: Graph) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.proto, self.helper, self.numpy_helper = TensorProto, helper, numpy_helper
        self.weights, self.config = weights, config
        self.int8, self.fused = graph == "int8", graph == "fused"
        self.initializers: list[Any] = []
        self.nodes: list[Any] = []
        self.external: dict[str, npt.NDArray[Any]] = {}
        self.elem_type = {np.dtype(np.float32): TensorProto.FLOAT,
                          np.dtype(np.int8): TensorProto.INT8}
        self.quantised_inputs: dict[str, list[str]] = {}

    def build(self) -> tuple[bytes, dict[str, npt.NDArray[Any]]]:
        proto, helper, config = self.proto, self.helper, self.config
        self._constants()
        x = self.node("Add", [self.word_vectors(), self.node("Gather", ["position",
                                                                        "position_ids"])])
        x = self.layer_norm(self.node("Add", [x, "token_type"]), "embeddings.LayerNorm")
        for i in range(config.layers):
            prefix = f"encoder.layer.{i}."
            x = self.fused_layer(x, prefix) if self.fused else self.plain_layer(x, prefix)
        self.nodes.append(helper.make_node("Identity", [x], ["hidden"]))
        mask = (helper.make_tensor_value_info("mask_index", proto.INT32, ["batch", "seq"])
                if self.fused else
                helper.make_tensor_value_info("mask_bias", proto.FLOAT,
                                              ["batch", 1, 1, "seq"]))
        graph = helper.make_graph(
            self.nodes, "bert",
            [helper.make_tensor_value_info("input_ids", proto.INT64, ["batch", "seq"]),
             helper.make_tensor_value_info("position_ids", proto.INT64, [1, "seq"]), mask],
            [helper.make_tensor_value_info("hidden", proto.FLOAT,
                                           ["batch", "seq", config.hidden])],
            self.initializers)
        opsets = [helper.make_opsetid("", OPSET)] + (
            [helper.make_opsetid("com.microsoft", 1)] if self.fused else [])
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8  # the oldest IR that opset 17 allows, so older runtimes load it
        serialised: bytes = model.SerializeToString()
        return serialised, self.external

    def _constants(self) -> None:
        config, const = self.config, self.const
        width = config.hidden // config.heads
        if self.int8:
            const("tiny", np.array(1e-12, dtype=np.float32))
            const("levels", np.array(127.0, dtype=np.float32))
            const("u8_zero", np.array(128, dtype=np.uint8))
            const("s8_zero", np.array(0, dtype=np.int8))
            const("flat", np.array([-1], dtype=np.int64))
            const("minus_one", np.array([-1], dtype=np.int64))
            # (batch, seq, -1): a product's rows back into its tokens' shape.
            self.nodes.append(self.helper.make_node(
                "Concat", [self.node("Shape", ["input_ids"]), "minus_one"], ["tokens_shape"],
                axis=0))
        self.big("position", f32(self.weights["embeddings.position_embeddings.weight"]))
        self.big("token_type", f32(self.weights["embeddings.token_type_embeddings.weight"][0]))
        if not self.fused:
            const("heads_shape", np.array([0, 0, config.heads, width], dtype=np.int64))
            const("hidden_shape", np.array([0, 0, config.hidden], dtype=np.int64))
            const("scale", np.array(1.0 / math.sqrt(width), dtype=np.float32))
            const("half", np.array(0.5, dtype=np.float32))
            const("one", np.array(1.0, dtype=np.float32))
            const("inv_sqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))

    def const(self, name: str, array: np.ndarray[Any, Any]) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(array),
                                                              name))
        return name

    def big(self, name: str, array: npt.NDArray[Any]) -> str:
        # Weights stay out of the protobuf: serialising 90 MB into it, and ONNX Runtime
        # parsing it back, would hold two more copies of the model in memory.
        self.external[name] = np.ascontiguousarray(array)
        placeholder = self.proto(name=name, data_type=self.elem_type[array.dtype],
                                 dims=array.shape, data_location=self.proto.EXTERNAL)
        # A reference the session resolves from `add_external_initializers`, never a file.
        placeholder.external_data.add(key="location", value="session-options")
        self.initializers.append(placeholder)
        return name

    def node(self, op: str, inputs: list[str], **attributes: Any) -> str:
        output = f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(self.helper.make_node(op, inputs, [output], **attributes))
        return output

    def ms_node(self, op: str, inputs: list[str], **attributes: Any) -> str:
        output = f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(self.helper.make_node(op, inputs, [output], domain="com.microsoft",
                                                **attributes))
        return output

    def weight(self, name: str, transpose: bool = False) -> str:
        array = f32(self.weights[name])
        return self.big(name, array.T if transpose else array)

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.node("LayerNormalization",
                         [x, self.weight(prefix + ".weight"), self.weight(prefix + ".bias")],
                         axis=-1, epsilon=self.config.eps)

    def linear(self, x: str, prefix: str) -> str:
        if self.int8:
            return self.linear_int8(x, prefix)
        # Stored as (out, in) like torch.nn.Linear; MatMul wants (in, out).
        product = self.node("MatMul", [x, self.weight(prefix + ".weight", transpose=True)])
        return self.node("Add", [product, self.weight(prefix + ".bias")])

    def linear_int8(self, x: str, prefix: str) -> str:
        node = self.node
        w = f32(self.weights[prefix + ".weight"]).T
        scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / np.float32(127.0)
        quantised = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        if x not in self.quantised_inputs:  # Q, K and V read the same input: quantise once
            self.quantised_inputs[x] = self.quantise_tokens(x)
        x_q, x_step = self.quantised_inputs[x]
        # (tokens, out) in int32, then the weights' scales, then back to (batch, seq, out)
        # and the tokens' scales: ONNX Runtime fuses the product, the cast and the first
        # scale into one kernel, which takes a per-column scale but not a per-token one
        # (multiplied in there, vectors came out at a cosine of 0.2-0.5).
        product = node("MatMulInteger", [x_q, self.big(prefix + ".weight_q", quantised),
                                         "u8_zero", "s8_zero"])
        product = node("Mul", [node("Cast", [product], to=self.proto.FLOAT),
                               self.big(prefix + ".weight_scale", scale.astype(np.float32))])
        product = node("Reshape", [product, "tokens_shape"])
        return node("Add", [node("Mul", [product, x_step]), self.weight(prefix + ".bias")])

    def quantise_tokens(self, x: str) -> list[str]:
        # Each token's activations on a scale of their own (symmetric, max |x| / 127), as
        # uint8 about 128, one row a token: a text's vector does not depend on the texts
        # batched with it (DynamicQuantizeLinear's one scale for the whole batch made it
        # so), it stays nearer float32's, and ONNX Runtime's fast kernels multiply uint8
        # by int8. QuantizeLinear does the division, rounding and cast in one pass.
        node = self.node
        peak = node("ReduceMax", [node("Abs", [x])], axes=[-1], keepdims=1)
        step = node("Div", [node("Max", [peak, "tiny"]), "levels"])
        rows = node("Reshape", [step, "flat"])
        zeros = node("Expand", ["u8_zero", node("Shape", [rows])])
        return [node("QuantizeLinear", [node("Flatten", [x], axis=2), rows, zeros], axis=0),
                step]

    def heads(self, projection: str, perm: list[int]) -> str:
        # (batch, seq, hidden) -> (batch, heads, seq, width), or (batch, heads, width, seq)
        # for K.
        return self.node("Transpose", [self.node("Reshape", [projection, "heads_shape"])],
                         perm=perm)

    def word_vectors(self) -> str:
        table = self.weights["embeddings.word_embeddings.weight"]
        if not self.int8:
            return self.node("Gather", [self.big("word", f32(table)), "input_ids"])
        quantised, scale = _quantise_rows(table)
        rows = self.node("Cast", [self.node("Gather", [self.big("word_q", quantised),
                                                       "input_ids"])], to=self.proto.FLOAT)
        return self.node("Mul", [rows, self.node("Gather", [self.big("word_scale", scale),
                                                             "input_ids"])])

    def plain_layer(self, x: str, p: str) -> str:
        node, linear, heads = self.node, self.linear, self.heads
        q = heads(linear(x, p + "attention.self.query"), [0, 2, 1, 3])
        k_t = heads(linear(x, p + "attention.self.key"), [0, 2, 3, 1])
        v = heads(linear(x, p + "attention.self.value"), [0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k_t]), "scale"]), "mask_bias"])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]),
                                   "hidden_shape"])
        x = self.layer_norm(node("Add", [linear(context, p + "attention.output.dense"), x]),
                            p + "attention.output.LayerNorm")
        up = linear(x, p + "intermediate.dense")
        gelu = node("Mul", [node("Mul", [up, "half"]),
                            node("Add", ["one", node("Erf", [node("Mul", [up, "inv_sqrt2"])])])])
        return self.layer_norm(node("Add", [linear(gelu, p + "output.dense"), x]),
                               p + "output.LayerNorm")

    def fused_layer(self, x: str, p: str) -> str:
        # ONNX Runtime's own BERT kernels (com.microsoft Attention, BiasGelu): one GEMM
        # for Q, K and V, attention over the real tokens, GELU in the bias add.
        weights, node = self.weights, self.node
        names = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
        qkv = self.big(p + "qkv.weight", np.concatenate([f32(weights[n + ".weight"]).T
                                                         for n in names], axis=1))
        qkv_bias = self.big(p + "qkv.bias", np.concatenate([f32(weights[n + ".bias"])
                                                            for n in names]))
        context = self.ms_node("Attention", [x, qkv, qkv_bias, "mask_index"],
                               num_heads=self.config.heads)
        x = self.layer_norm(node("Add", [self.linear(context, p + "attention.output.dense"),
                                         x]), p + "attention.output.LayerNorm")
        up = node("MatMul", [x, self.weight(p + "intermediate.dense.weight", transpose=True)])
        gelu = self.ms_node("BiasGelu", [up, self.weight(p + "intermediate.dense.bias")])
        return self.layer_norm(node("Add", [self.linear(gelu, p + "output.dense"), x]),
                               p + "output.LayerNorm")


class OnnxEncoder:
    """The encoder in an ONNX Runtime session (thread-safe: concurrent `encode` calls are fine)."""

    def __init__(self, weights: Weights, config: BertConfig, *, threads: int | None = None,
                 graph: Graph = "plain") -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(MAX_THREADS, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        model, arrays = build_model(weights, config, graph)
        self._fused = graph == "fused"
        # Copied into the session as it loads; nothing here needs to keep them after.
        options.add_external_initializers(
            list(arrays), [onnxruntime.OrtValue.ortvalue_from_numpy(a) for a in arrays.values()])
        try:
            self._session = onnxruntime.InferenceSession(
                model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime raises its own unrelated types; translate them here
            raise EmbeddingError(f"ONNX Runtime could not load the model: {exc}",
                                 provider="local") from exc
        self.runtime = f"onnxruntime {onnxruntime.__version__}" + (
            "" if graph == "plain" else f" {graph}")

    def encode(self, ids: I64, mask: F32) -> F32:
        feeds: dict[str, npt.NDArray[Any]] = {
            "input_ids": ids, "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None, :]}
        if self._fused:
            feeds["mask_index"] = mask.astype(np.int32)
        else:
            feeds["mask_bias"] = mask_bias(mask)
        try:
            hidden: F32 = self._session.run(["hidden"], feeds)[0]
        except Exception as exc:
            raise EmbeddingError(f"ONNX Runtime failed: {exc}", provider="local") from exc
        return hidden
