"""Build a tiny random Llama (byte-level tokenizer trained here) and PEFT LoRA adapters for the real-vLLM tests.

Run with the vLLM environment's Python (it has torch, transformers, tokenizers and peft):
    python build_tiny_model.py OUT_DIR
Writes OUT_DIR/model and OUT_DIR/adapters/r{8,16,64,128}; nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(out: Path) -> None:
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
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(model_dir, safe_serialization=True)
    for rank in (8, 16, 64, 128):
        base = LlamaForCausalLM.from_pretrained(model_dir)
        peft_model = get_peft_model(
            base,
            LoraConfig(
                r=rank,
                lora_alpha=2 * rank,
                init_lora_weights=False,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            ),
        )
        peft_model.save_pretrained(out / "adapters" / f"r{rank}", safe_serialization=True)
    print(model_dir)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
