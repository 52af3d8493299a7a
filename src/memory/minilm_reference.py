"""Reference embeddings for src/memory/minilm.test.ts: sentence-transformers on the same directory.

Usage: python minilm_reference.py MODEL_DIR TEXTS_JSON OUT_JSON
Reads a JSON list of strings and writes {"embeddings": [[...], ...], "token_counts": [...]}, where
token_counts are the untruncated lengths with [CLS]/[SEP] (so the test can check that some texts
really were truncated).
"""
import json
import sys

import torch
from sentence_transformers import SentenceTransformer


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit("usage: minilm_reference.py MODEL_DIR TEXTS_JSON OUT_JSON")
    model_dir, texts_path, out_path = sys.argv[1:]
    torch.set_num_threads(2)
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        sys.exit(f"{texts_path}: expected a JSON list of strings")
    model = SentenceTransformer(model_dir, device="cpu")
    embeddings = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    token_counts = [len(model.tokenizer(t.strip(), truncation=False)["input_ids"]) for t in texts]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({
            "embeddings": embeddings.astype(float).tolist(),
            "token_counts": token_counts,
            "max_seq_length": model.max_seq_length,
        }, f)


if __name__ == "__main__":
    main()
