#!/usr/bin/env python3
"""sentence-transformers (PyTorch) throughput peer for the embedding benchmark: the same model
directory and the same texts as `target/release/embed`, through `SentenceTransformer.encode`.

Usage: benches/st_throughput.py TEXTS.json --model DIR [--runs N] [--device auto|cuda|cpu]
       [--dtype auto|fp16|fp32] [--batch-size 64] [--check OUT.f32]

Loads the model from the local directory only (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are set):
`SentenceTransformer(DIR)` when the directory loads that way, else Transformer + Pooling (the
directory's 1_Pooling config, or mean) + Normalize. `--device auto` is CUDA when torch sees a
GPU, else the CPU; `--dtype auto` is fp16 on CUDA and fp32 on the CPU. One warm-up pass over all
texts, then one JSON line per run:
{"runtime", "device", "dtype", "chunks_per_s", "tokens_per_s", "padding", "tokens", "secs"}.
Tokens are counted with the model's own tokenizer after truncation to its max_seq_length,
including [CLS]/[SEP] (as the Rust encoder counts them); padding is computed on the batches
sentence-transformers itself forms (texts sorted by character length, longest first,
`--batch-size` per batch, each padded to its longest; none when it flattens inputs for flash
attention). The clock stops after the vectors are on the host (and torch.cuda.synchronize()).
`--check` writes the last run's vectors, L2-normalised float32 little-endian, in input order.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("texts", help="JSON list of texts")
    ap.add_argument("--model", default=os.environ.get("CIX_MODEL_DIR", os.path.join(ROOT, "models", "all-MiniLM-L6-v2")))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--dtype", choices=["auto", "fp16", "fp32"], default="auto")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--check", help="write the last run's vectors (f32 LE, normalised, input order) here")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.batch_size < 1:
        ap.error("--runs and --batch-size must be at least 1")
    return args


def resolve_device(device, cuda_available):
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device == "cuda" and not cuda_available:
        sys.exit("st_throughput: --device cuda but torch.cuda.is_available() is false")
    return device


def resolve_dtype(dtype, device):
    if dtype == "auto":
        return "fp16" if device == "cuda" else "fp32"
    return dtype


def max_seq_length_of(model_dir):
    """What the Rust loader uses: sentence_bert_config.json's max_seq_length (default 256),
    capped by config.json's max_position_embeddings."""
    n = 256
    sb = os.path.join(model_dir, "sentence_bert_config.json")
    if os.path.isfile(sb):
        with open(sb) as f:
            n = json.load(f).get("max_seq_length") or n
    with open(os.path.join(model_dir, "config.json")) as f:
        n = min(n, json.load(f).get("max_position_embeddings", n))
    return max(n, 2)


def st_order(texts):
    """The order SentenceTransformer.encode batches in: longest first by character length
    (np.argsort of the negated lengths, exactly as it computes it for str inputs)."""
    import numpy as np

    return [int(i) for i in np.argsort([-len(t) for t in texts])]


def batch_stats(order, lengths, batch_size):
    """(tokens, padded tokens) for texts of `lengths` (tokens after truncation, with special
    tokens), batched `batch_size` at a time in `order`, each batch padded to its longest."""
    tokens = sum(lengths)
    padded = 0
    for i in range(0, len(order), batch_size):
        batch = [lengths[k] for k in order[i : i + batch_size]]
        padded += len(batch) * max(batch)
    return tokens, padded


def st_modules():
    """Transformer, Pooling, Normalize from wherever this sentence-transformers keeps them."""
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer
    return Transformer, Pooling, Normalize


def load_model(model_dir, device):
    from sentence_transformers import SentenceTransformer

    max_len = max_seq_length_of(model_dir)
    try:
        model = SentenceTransformer(model_dir, device=device)
        how = "SentenceTransformer(dir)"
    except Exception as e:  # e.g. a modules.json naming a module this version cannot load
        print(f"st_throughput: SentenceTransformer({model_dir}) failed ({type(e).__name__}: {e}); "
              "building Transformer + Pooling + Normalize", file=sys.stderr)
        Transformer, Pooling, Normalize = st_modules()
        word = Transformer(model_dir, max_seq_length=max_len)
        pool_dir = os.path.join(model_dir, "1_Pooling")
        pooling = None
        if os.path.isfile(os.path.join(pool_dir, "config.json")):
            try:
                pooling = Pooling.load(pool_dir)
            except Exception:
                pooling = None
        if pooling is None:
            with open(os.path.join(model_dir, "config.json")) as f:
                pooling = Pooling(json.load(f)["hidden_size"], "mean")
        model = SentenceTransformer(modules=[word, pooling, Normalize()], device=device)
        how = "Transformer + Pooling + Normalize"
    # Without sentence_bert_config.json sentence-transformers would take the tokenizer's 512;
    # the Rust encoder caps at 256 then, and both must see the same tokens.
    if model.max_seq_length != max_len:
        model.max_seq_length = max_len
    return model, how


def token_lengths(model, texts):
    """Tokens per text exactly as sentence-transformers feeds them (its own preprocessing:
    strip, truncation to max_seq_length, special tokens), without padding."""
    prep = getattr(model, "preprocess", None) or model.tokenize
    lengths = []
    for i in range(0, len(texts), 256):
        feats = prep(texts[i : i + 256])
        lengths.extend(int(n) for n in feats["attention_mask"].sum(dim=1).tolist())
    return lengths


def flattens(model):
    """True when this sentence-transformers concatenates text inputs without padding (flash
    attention varlen): then nothing is padded."""
    try:
        return bool(model._can_flatten_inputs())
    except Exception:
        return False


def main(argv=None):
    args = parse_args(argv)
    with open(args.texts) as f:
        texts = json.load(f)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts) or not texts:
        sys.exit("st_throughput: TEXTS.json must be a non-empty JSON list of strings")

    import numpy as np
    import torch

    device = resolve_device(args.device, torch.cuda.is_available())
    dtype = resolve_dtype(args.dtype, device)
    model, how = load_model(args.model, device)
    if dtype == "fp16":
        model.half()
    model.eval()
    has_normalize = any(type(m).__name__ == "Normalize" for m in model)
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"st_throughput: {how}, max_seq_length {model.max_seq_length}, {device} ({gpu}), {dtype}, "
          f"torch {torch.__version__}", file=sys.stderr)

    lengths = token_lengths(model, texts)
    tokens, padded = batch_stats(st_order(texts), lengths, args.batch_size)
    if flattens(model):
        padded = tokens

    def run():
        with torch.inference_mode():
            v = model.encode(texts, batch_size=args.batch_size, show_progress_bar=False,
                             convert_to_numpy=True, normalize_embeddings=not has_normalize)
        if device == "cuda":
            torch.cuda.synchronize()
        return v

    run()  # warm-up (all shapes, so cuBLAS/cuDNN choices are made before timing)
    vecs = None
    for _ in range(args.runs):
        t = time.perf_counter()
        vecs = run()
        secs = time.perf_counter() - t
        print(json.dumps({"runtime": "sentence-transformers", "device": device, "dtype": dtype,
                          "chunks_per_s": len(texts) / secs, "tokens_per_s": tokens / secs,
                          "padding": 1 - tokens / max(padded, 1), "tokens": tokens, "secs": secs}),
              flush=True)
    if args.check:
        v = np.asarray(vecs, dtype=np.float32)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        v.astype("<f4").tofile(args.check)


if __name__ == "__main__":
    main()
