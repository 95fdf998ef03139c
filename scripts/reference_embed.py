#!/usr/bin/env python3
"""Independent numpy reference for the BERT sentence encoder in crates/kernels.

Implements the same forward pass as `cix-kernels` (BERT encoder, mean pooling over
the attention mask, L2 normalisation) with nothing but `tokenizers`, `safetensors`
and numpy, and writes crates/kernels/tests/fixtures/parity.json:

    [{"text": ..., "vector": [dim floats]}, ...]

Usage:
    scripts/reference_embed.py [--model DIR] [--texts FILE.json] [--out FILE.json]

`--texts` is a JSON list of strings; without it the built-in fixture texts are used.
Computation is done in float64 so the reference is as exact as possible.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
DEFAULT_OUT = os.path.join(ROOT, "crates", "kernels", "tests", "fixtures", "parity.json")


def erf(x):
    # vectorised math.erf (float64, exact to machine precision)
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class Bert:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg.get("layer_norm_eps", 1e-12)
        max_pos = cfg.get("max_position_embeddings", 512)
        max_len = 256
        sb = os.path.join(model_dir, "sentence_bert_config.json")
        if os.path.exists(sb):
            with open(sb) as f:
                max_len = json.load(f).get("max_seq_length", 256)
        self.max_len = min(max_len, max_pos)
        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {}
        for k, v in raw.items():
            if k.startswith("bert."):
                k = k[len("bert."):]
            self.w[k] = v.astype(np.float64)
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(self.max_len)

    def linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed_one(self, text):
        enc = self.tok.encode(text)
        ids = np.array(enc.ids, dtype=np.int64)
        n = len(ids)
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        dh = self.hidden // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self.linear(x, p + "attention.self.query").reshape(n, self.heads, dh).transpose(1, 0, 2)
            k = self.linear(x, p + "attention.self.key").reshape(n, self.heads, dh).transpose(1, 0, 2)
            v = self.linear(x, p + "attention.self.value").reshape(n, self.heads, dh).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
            s = s - s.max(-1, keepdims=True)
            e = np.exp(s)
            a = e / e.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(1, 0, 2).reshape(n, self.hidden)
            attn = self.linear(ctx, p + "attention.output.dense")
            x = layer_norm(attn + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = self.linear(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            o = self.linear(h, p + "output.dense")
            x = layer_norm(o + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps)
        # single unpadded sequence: mean pooling over all tokens == masked mean pooling
        pooled = x.mean(0)
        return pooled / max(np.linalg.norm(pooled), 1e-12), n


LOREM = (
    "Search engines for source code need to understand both the structure and the meaning of "
    "programs. A lexical index finds identifiers quickly, but it cannot tell that a function named "
    "fetch_user and another called load_account perform similar work. Dense embeddings close that gap "
    "by mapping each chunk of code into a vector space where semantically related snippets land near "
    "one another. The indexer walks the repository, splits files into syntactic chunks using a parser, "
    "and sends each chunk through a small transformer encoder. "
)

LONG_PROSE = " ".join([LOREM] * 5)  # ~450 words, well beyond 256 tokens

LONG_RUST = "\n".join(
    f"fn handler_{i}(req: &Request, db: &mut Database) -> Result<Response, Error> {{\n"
    f"    let user = db.find_user(req.user_id)?.ok_or(Error::NotFound({i}))?;\n"
    f"    if user.quota < {i * 10} {{ return Err(Error::Quota(user.id)); }}\n"
    f"    Ok(Response::json(&user))\n}}"
    for i in range(20)
)

LONG_PY = "\n".join(
    f"def transform_{i}(rows, key='{chr(97 + i % 26)}'):\n"
    f"    out = []\n    for r in rows:\n        if r.get(key) is not None and r[key] > {i}:\n"
    f"            out.append({{**r, 'score': r[key] * {i}.5}})\n    return sorted(out, key=lambda r: r['score'])\n"
    for i in range(15)
)

TEXTS = [
    "fn main() { println!(\"Hello, world!\"); }",
    "pub fn parse_config(path: &Path) -> Result<Config, Error> {\n    let text = std::fs::read_to_string(path)?;\n    toml::from_str(&text).map_err(Error::from)\n}",
    "impl<T: Ord> BinaryHeap<T> { pub fn push(&mut self, item: T) { self.data.push(item); self.sift_up(self.data.len() - 1); } }",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "class UserRepository:\n    def __init__(self, session):\n        self.session = session\n\n    def get(self, user_id):\n        return self.session.query(User).filter_by(id=user_id).one_or_none()",
    "const debounce = (fn, ms) => { let t; return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); }; };",
    "export async function fetchJson(url) {\n  const res = await fetch(url);\n  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n}",
    "func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {\n\ts.mux.ServeHTTP(w, r)\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tch := make(chan int)\n\tgo func() { ch <- 42 }()\n\tfmt.Println(<-ch)\n}",
    "SELECT u.id, u.name, COUNT(o.id) AS orders FROM users u LEFT JOIN orders o ON o.user_id = u.id GROUP BY u.id, u.name HAVING COUNT(o.id) > 5 ORDER BY orders DESC;",
    "CREATE INDEX idx_orders_created ON orders (created_at) WHERE status = 'open';",
    "How do I read a file line by line in Rust?",
    "The quick brown fox jumps over the lazy dog.",
    "Binary search finds the position of a target value within a sorted array in logarithmic time.",
    "authentication",
    "HashMap",
    "",
    "   ",
    "日本語のテキストと絵文字 🚀🔥 mixed with English words",
    "Ünïcödé strings: naïve café, Straße, Ελληνικά, русский текст, مرحبا",
    "🎉🎉🎉",
    "error[E0382]: borrow of moved value: `v`\n  --> src/main.rs:4:20",
    "# TODO: handle the edge case where the buffer is empty\n# FIXME(perf): avoid quadratic loop",
    "{\"name\": \"cix\", \"version\": \"0.1.0\", \"dependencies\": {\"serde\": \"1\"}}",
    LONG_PROSE,
    LONG_RUST,
    LONG_PY,
    "word " * 300,
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.environ.get("CIX_MODEL_DIR", DEFAULT_MODEL))
    ap.add_argument("--texts", help="JSON list of strings (default: built-in fixture texts)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    texts = TEXTS
    if args.texts:
        with open(args.texts) as f:
            texts = json.load(f)
    model = Bert(args.model)
    out = []
    capped = 0
    for t in texts:
        vec, n = model.embed_one(t)
        capped += n == model.max_len
        out.append({"text": t, "tokens": n, "vector": [float(v) for v in vec.astype(np.float32)]})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=None)
        f.write("\n")
    print(f"wrote {len(out)} vectors ({capped} hit the {model.max_len}-token cap) to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
