#!/usr/bin/env python3
"""CPU throughput peer for the embedding benchmark: the same all-MiniLM-L6-v2 forward pass in
float32 numpy (OpenBLAS matmuls, scipy's erf for GELU), batched like the Rust encoder (texts
sorted by token length, batches of at most 64 texts and 8192 padded tokens, additive attention
mask, masked mean pooling, L2 normalisation).

Usage: benches/reference_throughput.py TEXTS.json [--model DIR] [--runs N] [--check OUT.f32]
Prints one JSON line per run: {"chunks_per_s", "tokens_per_s", "padding", "seconds"}.
"""

import argparse
import json
import math
import os
import time

import sys

import numpy as np
from safetensors.numpy import load_file
from scipy.special import erf
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from reference_embed import layer_norm  # noqa: E402  (one LayerNorm for both references)


class Bert:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg.get("layer_norm_eps", 1e-12)
        self.max_len = min(256, cfg.get("max_position_embeddings", 512))
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k[5:] if k.startswith("bert.") else k: v.astype(np.float32) for k, v in raw.items()}
        # Pre-transpose linear weights once (what any serious CPU runtime does).
        self.wt = {k: np.ascontiguousarray(v.T) for k, v in self.w.items() if k.endswith(".weight") and v.ndim == 2}
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(self.max_len)

    def linear(self, x, name):
        return x @ self.wt[name + ".weight"] + self.w[name + ".bias"]

    def forward(self, ids, mask):
        b, n = ids.shape
        w = self.w
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + w["embeddings.token_type_embeddings.weight"][0]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        dh = self.hidden // self.heads
        add_mask = ((1.0 - mask) * -1e9).astype(np.float32)[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(dh))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self.linear(x, p + "attention.self.query").reshape(b, n, self.heads, dh).transpose(0, 2, 1, 3)
            k = self.linear(x, p + "attention.self.key").reshape(b, n, self.heads, dh).transpose(0, 2, 3, 1)
            v = self.linear(x, p + "attention.self.value").reshape(b, n, self.heads, dh).transpose(0, 2, 1, 3)
            s = (q @ k) * scale + add_mask
            s = s - s.max(-1, keepdims=True)
            e = np.exp(s)
            a = e / e.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(0, 2, 1, 3).reshape(b, n, self.hidden)
            x = layer_norm(self.linear(ctx, p + "attention.output.dense") + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = self.linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h * np.float32(1.0 / math.sqrt(2.0))))
            x = layer_norm(self.linear(h, p + "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        m = mask[:, :, None]
        pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def embed(self, texts, budget=8192, max_batch=64):
        encs = [self.tok.encode(t).ids for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encs[i]))
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)
        tokens = sum(len(e) for e in encs)
        padded = 0
        i = 0
        while i < len(order):
            j = i
            while j < len(order) and j - i < max_batch and (j - i + 1) * len(encs[order[j]]) <= budget:
                j += 1
            j = max(j, i + 1)
            batch = order[i:j]
            n = max(len(encs[k]) for k in batch)
            ids = np.zeros((len(batch), n), dtype=np.int64)
            mask = np.zeros((len(batch), n), dtype=np.float32)
            for r, k in enumerate(batch):
                ids[r, : len(encs[k])] = encs[k]
                mask[r, : len(encs[k])] = 1.0
            out[batch] = self.forward(ids, mask)
            padded += len(batch) * n
            i = j
        return out, tokens, padded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("texts")
    ap.add_argument("--model", default=os.environ.get("CIX_MODEL_DIR", os.path.join(ROOT, "models", "all-MiniLM-L6-v2")))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--check", help="write the vectors (f32 LE) here for a parity check")
    args = ap.parse_args()
    texts = json.load(open(args.texts))
    bert = Bert(args.model)
    bert.embed(texts[:8])  # warm-up
    for _ in range(args.runs):
        t = time.perf_counter()
        vecs, tokens, padded = bert.embed(texts)
        s = time.perf_counter() - t
        print(json.dumps({"impl": "numpy-f32", "chunks": len(texts), "tokens": tokens, "seconds": s,
                          "chunks_per_s": len(texts) / s, "tokens_per_s": tokens / s,
                          "padding": 1 - tokens / padded}), flush=True)
    if args.check:
        vecs.astype("<f4").tofile(args.check)


if __name__ == "__main__":
    main()
