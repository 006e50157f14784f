#!/usr/bin/env python3
"""Write an fp32 ONNX graph of sentence-transformers/all-MiniLM-L6-v2 from its model.safetensors.

No torch: the BERT encoder is spelled out with the `onnx` helper API in standard ops (opset 12, the
form ONNX Runtime's extended level fuses back into Attention, LayerNormalization and BiasGelu):
embeddings + LayerNorm (eps from config.json), N post-LN encoder layers, exact-erf GELU, then mean
pooling over the attention mask and L2 normalisation, so the graph outputs `sentence_embedding`
[batch, hidden] directly. Inputs: input_ids, attention_mask, token_type_ids (int64 [batch, seq]).

Deterministic: the same safetensors give the same bytes.

usage: build_onnx.py MODEL_DIR OUT.onnx
"""
import json
import math
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DTYPES = {"F32": np.float32, "I64": np.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[meta["dtype"]]).reshape(meta["shape"])
    return out


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type, inputs, out=None, **attrs):
        self.n += 1
        out = out or f"{op_type.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def main(model_dir, out_path):
    cfg = json.load(open(f"{model_dir}/config.json"))
    w = load_safetensors(f"{model_dir}/model.safetensors")
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim, eps = hidden // heads, cfg["layer_norm_eps"]
    g = Graph()
    two = g.const("two", np.array(2.0, np.float32))
    epsilon = g.const("layer_norm_eps", np.array(eps, np.float32))

    def linear(x, prefix):
        # torch Linear stores [out, in]; MatMul wants [in, out].
        wt = g.const(prefix + ".weight_t", w[prefix + ".weight"].T.astype(np.float32))
        b = g.const(prefix + ".bias", w[prefix + ".bias"].astype(np.float32))
        return g.op("Add", [g.op("MatMul", [x, wt]), b])

    def layer_norm(x, prefix):
        # Spelled out (opset 12 has no LayerNormalization op); ONNX Runtime fuses it back into one.
        mean = g.op("ReduceMean", [x], axes=[-1])
        d = g.op("Sub", [x, mean])
        var = g.op("ReduceMean", [g.op("Pow", [d, two])], axes=[-1])
        normed = g.op("Div", [d, g.op("Sqrt", [g.op("Add", [var, epsilon])])])
        scale = g.const(prefix + ".weight", w[prefix + ".weight"])
        bias = g.const(prefix + ".bias", w[prefix + ".bias"])
        return g.op("Add", [g.op("Mul", [normed, scale]), bias])

    # Embeddings: word + position + token type, then LayerNorm.
    word = g.op("Gather", [g.const("word_embeddings", w["embeddings.word_embeddings.weight"]), "input_ids"])
    # Position embeddings: the first seq_len rows of the table. Every index here is a 1-D tensor:
    # ONNX Runtime's extended level shares equal constants across shapes, so a scalar index (the
    # usual Shape -> Gather(1) -> Range spelling) was turned into a 2-D Slice start and failed.
    seq_len = g.op("Slice", [g.op("Shape", ["input_ids"]), g.const("one_1d", np.array([1], np.int64)),
                             g.const("two_1d", np.array([2], np.int64))])
    pos = g.op("Slice", [g.const("position_embeddings", w["embeddings.position_embeddings.weight"]),
                         g.const("zero_1d", np.array([0], np.int64)), seq_len,
                         g.const("axis0_1d", np.array([0], np.int64))])
    typ = g.op("Gather", [g.const("token_type_embeddings", w["embeddings.token_type_embeddings.weight"]),
                          "token_type_ids"])
    h = layer_norm(g.op("Add", [g.op("Add", [word, pos]), typ]), "embeddings.LayerNorm")

    # Additive attention mask [batch, 1, 1, seq]: 0 where attended, -1e4 on padding (as BERT).
    # Spelled as BERT's exporters spell it (Unsqueeze 1, Unsqueeze 2, Cast, 1 - m, * -1e4), the shape
    # ONNX Runtime's attention fusion looks for.
    mask_f = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    one = g.const("one_f", np.array(1.0, np.float32))
    m4 = g.op("Unsqueeze", [g.op("Unsqueeze", ["attention_mask"], axes=[1])], axes=[2])
    ext = g.op("Mul", [g.op("Sub", [one, g.op("Cast", [m4], to=TensorProto.FLOAT)]),
                       g.const("neg_big", np.array(-10000.0, np.float32))])

    split_shape = g.const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = g.const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = g.const("attn_scale", np.array(math.sqrt(head_dim), np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    half = g.const("half", np.array(0.5, np.float32))

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def heads_of(name, perm):
            return g.op("Transpose", [g.op("Reshape", [linear(h, f"{p}.attention.self.{name}"), split_shape])],
                        perm=perm)

        q = heads_of("query", [0, 2, 1, 3])
        k = heads_of("key", [0, 2, 3, 1])
        v = heads_of("value", [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), scale]), ext])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=3), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        h1 = layer_norm(g.op("Add", [linear(ctx, f"{p}.attention.output.dense"), h]),
                        f"{p}.attention.output.LayerNorm")
        inter = linear(h1, f"{p}.intermediate.dense")
        gelu = g.op("Mul", [g.op("Mul", [inter, half]),
                            g.op("Add", [one, g.op("Erf", [g.op("Div", [inter, sqrt2])])])])
        h = layer_norm(g.op("Add", [linear(gelu, f"{p}.output.dense"), h1]), f"{p}.output.LayerNorm")

    # Mean pooling over attended tokens, then L2 normalisation.
    m3 = g.op("Unsqueeze", [mask_f], axes=[2])
    summed = g.op("ReduceSum", [g.op("Mul", [h, m3])], axes=[1], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [m3], axes=[1], keepdims=0), g.const("min_count", np.array(1e-9, np.float32))])
    mean = g.op("Div", [summed, count])
    norm = g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [mean, mean])], axes=[1], keepdims=1)])
    norm = g.op("Max", [norm, g.const("min_norm", np.array(1e-12, np.float32))])
    g.nodes.append(helper.make_node("Div", [mean, norm], ["sentence_embedding"]))

    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(g.nodes, "all-MiniLM-L6-v2", ints, [out], initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)],
                              producer_name="memproxy-build-onnx")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
