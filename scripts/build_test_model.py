#!/usr/bin/env python3
"""Write tiny sentence-transformers model directories, and numpy reference embeddings for them.

No torch: a 2-layer BERT (hidden 32, 2 heads) with seeded random weights and the vocabulary of a
given BERT tokenizer.json (all-MiniLM-L6-v2's), spelled out in standard ONNX ops as
scripts/build_onnx.py spells all-MiniLM-L6-v2, but without pooling: the graph outputs TOKEN
embeddings, `last_hidden_state` [batch, sequence, 32]. Two model directories share the graph:

  tiny-cls/   CLS pooling, Normalize, max_seq_length 24, prompts query "query: " and
              passage "passage: " (e5-style) in config_sentence_transformers.json
  tiny-mean/  mean pooling, no Normalize, max_seq_length 64, no prompts

and reference.json holds, for each case (a directory, the settings that override its files, a
role), the embeddings of a few texts computed here in float64 from the same weights: the role's
prompt prepended, WordPiece tokens truncated at max_seq_length, the encoder, the pooling, the
normalisation when asked for. Deterministic: the same tokenizer.json gives the same bytes.

usage: build_test_model.py TOKENIZER_JSON OUT_DIR
"""
import json
import math
import os
import shutil
import sys
import unicodedata

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 39
HIDDEN, HEADS, LAYERS, INTERMEDIATE, POSITIONS, EPS = 32, 2, 2, 64, 64, 1e-12

TEXTS = [
    "The user prefers green tea in the morning.",
    "Tokenization splits unbelievable words into pieces!",
    "Where does my sister live?",
    "A, b; c: d. (e) [f] 42 - 7 = 35",
    "memproxy remembers what an agent was told, and recalls it by meaning when a question comes. "
    "This sentence goes on long enough that every model here truncates it somewhere before the end.",
]

# name, model directory, settings (memproxy's names; absent: the directory's files), role.
BGE = "Represent this sentence for searching relevant passages: "
CASES = [
    ("cls-document", "tiny-cls", {}, "document"),
    ("cls-query", "tiny-cls", {}, "query"),
    ("mean-document", "tiny-mean", {}, "document"),
    ("mean-query", "tiny-mean", {}, "query"),
    ("lasttoken-bge-document", "tiny-mean",
     {"pooling": "lasttoken", "normalize": True, "max_seq_length": 20, "query_prompt": BGE}, "document"),
    ("lasttoken-bge-query", "tiny-mean",
     {"pooling": "lasttoken", "normalize": True, "max_seq_length": 20, "query_prompt": BGE}, "query"),
    ("max-document", "tiny-mean", {"pooling": "max"}, "document"),
    ("cls-unprompted-document", "tiny-cls",
     {"query_prompt": "", "document_prompt": "", "normalize": False}, "document"),
]

DIRS = {
    "tiny-cls": {"pooling": "cls", "normalize": True, "max_seq_length": 24,
                 "prompts": {"query": "query: ", "passage": "passage: "}},
    "tiny-mean": {"pooling": "mean", "normalize": False, "max_seq_length": 64, "prompts": None},
}


# --- weights --------------------------------------------------------------------------------

def weights(vocab_size):
    rng = np.random.default_rng(SEED)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm_pair():
        return (1.0 + normal([HIDDEN], 0.1), normal([HIDDEN], 0.02))

    w = {
        "word": normal([vocab_size, HIDDEN], 0.5),
        "pos": normal([POSITIONS, HIDDEN], 0.5),
        "type": normal([2, HIDDEN], 0.02),
        "ln": norm_pair(),
        "layers": [],
    }
    for _ in range(LAYERS):
        layer = {}
        for name, (i, o) in [("q", (HIDDEN, HIDDEN)), ("k", (HIDDEN, HIDDEN)), ("v", (HIDDEN, HIDDEN)),
                             ("o", (HIDDEN, HIDDEN)), ("up", (HIDDEN, INTERMEDIATE)),
                             ("down", (INTERMEDIATE, HIDDEN))]:
            layer[name] = (normal([i, o], 0.3), normal([o], 0.1))
        layer["ln1"], layer["ln2"] = norm_pair(), norm_pair()
        w["layers"].append(layer)
    return w


# --- the ONNX graph (as build_onnx.py spells BERT, opset 12) -------------------------------

# Graph: build_onnx.py's, which spells the real model's BERT the same way.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_onnx import Graph  # noqa: E402


def graph(w):
    g = Graph()
    two = g.const("two", np.array(2.0, np.float32))
    epsilon = g.const("eps", np.array(EPS, np.float32))
    one = g.const("one_f", np.array(1.0, np.float32))

    def linear(x, name, wb):
        return g.op("Add", [g.op("MatMul", [x, g.const(name + ".w", wb[0])]), g.const(name + ".b", wb[1])])

    def layer_norm(x, name, gb):
        mean = g.op("ReduceMean", [x], axes=[-1])
        d = g.op("Sub", [x, mean])
        var = g.op("ReduceMean", [g.op("Pow", [d, two])], axes=[-1])
        normed = g.op("Div", [d, g.op("Sqrt", [g.op("Add", [var, epsilon])])])
        return g.op("Add", [g.op("Mul", [normed, g.const(name + ".g", gb[0])]), g.const(name + ".b", gb[1])])

    word = g.op("Gather", [g.const("word_embeddings", w["word"]), "input_ids"])
    seq_len = g.op("Slice", [g.op("Shape", ["input_ids"]), g.const("one_1d", np.array([1], np.int64)),
                             g.const("two_1d", np.array([2], np.int64))])
    pos = g.op("Slice", [g.const("position_embeddings", w["pos"]), g.const("zero_1d", np.array([0], np.int64)),
                         seq_len, g.const("axis0_1d", np.array([0], np.int64))])
    typ = g.op("Gather", [g.const("token_type_embeddings", w["type"]), "token_type_ids"])
    h = layer_norm(g.op("Add", [g.op("Add", [word, pos]), typ]), "emb.ln", w["ln"])

    m4 = g.op("Unsqueeze", [g.op("Unsqueeze", ["attention_mask"], axes=[1])], axes=[2])
    ext = g.op("Mul", [g.op("Sub", [one, g.op("Cast", [m4], to=TensorProto.FLOAT)]),
                       g.const("neg_big", np.array(-10000.0, np.float32))])
    head_dim = HIDDEN // HEADS
    split = g.const("split_heads", np.array([0, 0, HEADS, head_dim], np.int64))
    merge = g.const("merge_heads", np.array([0, 0, HIDDEN], np.int64))
    scale = g.const("attn_scale", np.array(math.sqrt(head_dim), np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    half = g.const("half", np.array(0.5, np.float32))

    for i, layer in enumerate(w["layers"]):
        p = f"layer{i}"

        def heads_of(name, perm):
            return g.op("Transpose", [g.op("Reshape", [linear(h, f"{p}.{name}", layer[name]), split])], perm=perm)

        q, k, v = heads_of("q", [0, 2, 1, 3]), heads_of("k", [0, 2, 3, 1]), heads_of("v", [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), scale]), ext])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=3), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        h1 = layer_norm(g.op("Add", [linear(ctx, f"{p}.o", layer["o"]), h]), f"{p}.ln1", layer["ln1"])
        inter = linear(h1, f"{p}.up", layer["up"])
        gelu = g.op("Mul", [g.op("Mul", [inter, half]),
                            g.op("Add", [one, g.op("Erf", [g.op("Div", [inter, sqrt2])])])])
        h = layer_norm(g.op("Add", [linear(gelu, f"{p}.down", layer["down"]), h1]), f"{p}.ln2", layer["ln2"])
    g.op("Identity", [h], out="last_hidden_state")

    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])
    model = helper.make_model(helper.make_graph(g.nodes, "tiny-bert", ints, [out], initializer=g.inits),
                              opset_imports=[helper.make_opsetid("", 12)], producer_name="memproxy-build-test-model")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# --- the numpy reference ----------------------------------------------------------------------

class WordPiece:
    """The BERT tokenizer of a tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece,
    [CLS] $A [SEP]), for the texts above."""

    def __init__(self, path):
        t = json.load(open(path))
        assert t["normalizer"]["type"] == "BertNormalizer", t["normalizer"]
        assert t["pre_tokenizer"]["type"] == "BertPreTokenizer", t["pre_tokenizer"]
        assert t["model"]["type"] == "WordPiece", t["model"]["type"]
        self.lower = t["normalizer"]["lowercase"]
        strip = t["normalizer"]["strip_accents"]
        self.strip = self.lower if strip is None else strip
        self.vocab = t["model"]["vocab"]
        self.unk = self.vocab[t["model"]["unk_token"]]
        self.prefix = t["model"]["continuing_subword_prefix"]
        self.max_chars = t["model"]["max_input_chars_per_word"]
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    @staticmethod
    def punctuation(c):
        o = ord(c)
        return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or \
            unicodedata.category(c).startswith("P")

    def words(self, text):
        text = "".join(" " if c.isspace() else c for c in text if unicodedata.category(c)[0] != "C" or c.isspace())
        if self.lower:
            text = text.lower()
        if self.strip:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        out = []
        for chunk in text.split():
            word = ""
            for c in chunk:
                if self.punctuation(c):
                    if word:
                        out.append(word)
                    out.append(c)
                    word = ""
                else:
                    word += c
            if word:
                out.append(word)
        return out

    def piece(self, word):
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = word[start:end] if start == 0 else self.prefix + word[start:end]
                if sub in self.vocab:
                    ids.append(self.vocab[sub])
                    break
                end -= 1
            if end == start:
                return [self.unk]
            start = end
        return ids

    def encode(self, text, max_len):
        ids = [i for w in self.words(text) for i in self.piece(w)]
        return [self.cls] + ids[:max_len - 2] + [self.sep]


def encode_tokens(w, ids):
    """Token embeddings of one text (no padding), float64."""
    n = len(ids)

    def ln(x, gb):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * gb[0].astype(np.float64) + gb[1].astype(np.float64)

    def lin(x, wb):
        return x @ wb[0].astype(np.float64) + wb[1].astype(np.float64)

    erf = np.vectorize(math.erf)
    h = w["word"][ids].astype(np.float64) + w["pos"][:n].astype(np.float64) + w["type"][0].astype(np.float64)
    h = ln(h, w["ln"])
    d = HIDDEN // HEADS
    for layer in w["layers"]:
        q, k, v = (lin(h, layer[x]).reshape(n, HEADS, d).transpose(1, 0, 2) for x in ("q", "k", "v"))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = (s / s.sum(-1, keepdims=True)) @ v
        ctx = ctx.transpose(1, 0, 2).reshape(n, HIDDEN)
        h1 = ln(lin(ctx, layer["o"]) + h, layer["ln1"])
        inter = lin(h1, layer["up"])
        h = ln(lin(0.5 * inter * (1.0 + erf(inter / math.sqrt(2.0))), layer["down"]) + h1, layer["ln2"])
    return h


def pool(tokens, mode):
    if mode == "cls":
        return tokens[0]
    if mode == "mean":
        return tokens.mean(0)
    if mode == "max":
        return tokens.max(0)
    if mode == "lasttoken":
        return tokens[-1]
    raise ValueError(mode)


def main(tokenizer_path, out):
    os.makedirs(out, exist_ok=True)
    tok = WordPiece(tokenizer_path)
    w = weights(len(tok.vocab))
    model = graph(w)
    for name, d in DIRS.items():
        path = os.path.join(out, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(os.path.join(path, "1_Pooling"))
        onnx.save(model, os.path.join(path, "model.onnx"))
        shutil.copyfile(tokenizer_path, os.path.join(path, "tokenizer.json"))
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        if d["normalize"]:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        pooling = {"word_embedding_dimension": HIDDEN, "include_prompt": True}
        for mode, key in [("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                          ("max", "pooling_mode_max_tokens"), (None, "pooling_mode_mean_sqrt_len_tokens"),
                          (None, "pooling_mode_weightedmean_tokens"), ("lasttoken", "pooling_mode_lasttoken")]:
            pooling[key] = mode == d["pooling"]
        files = {
            "modules.json": modules,
            "1_Pooling/config.json": pooling,
            "sentence_bert_config.json": {"max_seq_length": d["max_seq_length"], "do_lower_case": False},
            "config_sentence_transformers.json": {"prompts": d["prompts"] or {}, "default_prompt_name": None,
                                                  "similarity_fn_name": "cosine"},
            "config.json": {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": HIDDEN,
                            "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
                            "intermediate_size": INTERMEDIATE, "max_position_embeddings": POSITIONS,
                            "layer_norm_eps": EPS, "vocab_size": len(tok.vocab), "type_vocab_size": 2},
        }
        for f, v in files.items():
            with open(os.path.join(path, f), "w") as fh:
                json.dump(v, fh, indent=2)

    cases = []
    for name, model_dir, settings, role in CASES:
        d = DIRS[model_dir]
        prompts = d["prompts"] or {}
        prompt = settings.get(f"{role}_prompt")
        if prompt is None:
            prompt = prompts.get("query", "") if role == "query" else \
                next((prompts[k] for k in ("document", "passage", "corpus") if k in prompts), "")
        mode = settings.get("pooling", d["pooling"])
        normalize = settings.get("normalize", d["normalize"])
        max_len = settings.get("max_seq_length", d["max_seq_length"])
        vectors, lengths = [], []
        for text in TEXTS:
            ids = tok.encode(prompt + text, max_len)
            v = pool(encode_tokens(w, ids), mode)
            if normalize:
                v = v / max(np.linalg.norm(v), 1e-12)
            vectors.append([float(x) for x in v])
            lengths.append(len(ids))
        cases.append({"name": name, "model": model_dir, "settings": settings, "role": role,
                      "prompt": prompt, "tokens": lengths, "texts": TEXTS, "embeddings": vectors})
    with open(os.path.join(out, "reference.json"), "w") as fh:
        json.dump({"dim": HIDDEN, "cases": cases}, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
