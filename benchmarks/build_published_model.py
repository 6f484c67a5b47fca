"""Build the published benchmark's random Llama and its PEFT LoRA adapters, offline (nothing is downloaded).

Run with the vLLM environment's Python (it has torch, transformers, tokenizers and peft):

    ~/.cache/lorafleet/vllm-venv/bin/python benchmarks/build_published_model.py OUT_DIR \
        [--hidden 1024] [--intermediate 2816] [--layers 6] [--heads 8] [--ranks 8,16,32,64,128,8,16,32,64,128]

Writes OUT_DIR/model (a byte-level BPE tokenizer trained here, random float32 weights), OUT_DIR/adapters/a{i}
(one adapter per rank, all seven Llama projections targeted, random non-zero weights so vLLM reads and applies
real tensors) and OUT_DIR/manifest.json (the shapes, each adapter's rank and its size on disk). The model is
small enough that a 4-token generation stays quick on a CPU; the adapters are large enough (rank 128: tens of
MB) that a cold load is visible next to it. `benchmarks/published.py` calls this when no --model is given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build(out: Path, hidden: int, intermediate: int, layers: int, heads: int, ranks: list[int]) -> dict[str, Any]:
    import torch
    from peft import LoraConfig, get_peft_model
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    model_dir = out / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    corpus = ["lorafleet keeps adapters warm across a fleet of engines. " * 4, "ping pong hello world 0123456789"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=320, min_frequency=1, special_tokens=["<s>", "</s>", "<unk>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(model_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(model_dir, safe_serialization=True)
    adapters = []
    for i, rank in enumerate(ranks):
        torch.manual_seed(1000 + i)
        peft_model = get_peft_model(
            LlamaForCausalLM(config),
            LoraConfig(r=rank, lora_alpha=2 * rank, init_lora_weights=False, target_modules=TARGETS),
        )
        path = out / "adapters" / f"a{i}"
        peft_model.save_pretrained(path, safe_serialization=True)
        adapters.append({"id": f"a{i}", "rank": rank, "path": str(path), "bytes": folder_bytes(path)})
    manifest = {
        "model": str(model_dir),
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_layers": layers,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "dtype": "float32",
        "target_modules": TARGETS,
        "model_bytes": folder_bytes(model_dir),
        "adapters": adapters,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ranks", default="8,16,32,64,128,8,16,32,64,128")
    args = parser.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    manifest = build(args.out, args.hidden, args.intermediate, args.layers, args.heads, ranks)
    print(json.dumps(manifest))


if __name__ == "__main__":
    main()
