"""Reference hidden states for the BERT encoder test in src/memory/minilm.test.ts.

Usage: python bert_reference.py OUT_ROOT INPUTS_JSON ACT:HEAD [ACT:HEAD ...]
For each ACT:HEAD (e.g. gelu:base, relu:masked-lm) builds a small randomly initialised Hugging Face
BERT with hidden_act ACT (`BertModel`, or `BertForMaskedLM` for HEAD "masked-lm", whose parameters
carry the "bert." prefix and a head to ignore), saves it with save_pretrained into OUT_ROOT/ACT-HEAD,
runs it on the ids / attention mask / token type ids in INPUTS_JSON, and writes the last hidden
states to OUT_ROOT/ACT-HEAD/hidden.json. One process for all variants: importing torch is slow.
"""
import json
import os
import sys

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel


def build_and_run(out_dir: str, hidden_act: str, head: str, inputs: dict) -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=24, type_vocab_size=2, layer_norm_eps=1e-12, hidden_act=hidden_act,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = (BertForMaskedLM(config) if head == "masked-lm" else BertModel(config)).eval()
    # Fresh LayerNorms are exactly 1 and 0; perturb every parameter so a swapped weight and bias would show.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(out_dir, safe_serialization=True)
    encoder = model.bert if head == "masked-lm" else model
    with torch.no_grad():
        hidden = encoder(
            input_ids=torch.tensor(inputs["ids"]),
            attention_mask=torch.tensor(inputs["mask"]),
            token_type_ids=torch.tensor(inputs["types"]),
        ).last_hidden_state
    with open(f"{out_dir}/hidden.json", "w", encoding="utf-8") as f:
        json.dump(hidden.tolist(), f)


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: bert_reference.py OUT_ROOT INPUTS_JSON ACT:HEAD [ACT:HEAD ...]")
    out_root, inputs_path, *variants = sys.argv[1:]
    torch.set_num_threads(1)
    with open(inputs_path, encoding="utf-8") as f:
        inputs = json.load(f)
    for variant in variants:
        hidden_act, _, head = variant.partition(":")
        if head not in ("base", "masked-lm"):
            sys.exit(f"variant {variant!r}: HEAD must be base or masked-lm")
        build_and_run(os.path.join(out_root, f"{hidden_act}-{head}"), hidden_act, head, inputs)


if __name__ == "__main__":
    main()
