#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the small ONNX models that tests/onnx imports (tests/onnx/models).

Built with Debian's python3-onnx (onnx.helper), several operator-set
versions, so that the importer meets what real exporters write: Gemm with
bias, convolutions with auto_pad and groups, batch norm, pooling, layer norm,
attention written out as MatMul/Softmax, shape computations
(Shape -> Gather -> Concat -> Reshape), axes given as attributes (old
opsets) and as inputs (opset 13+), operators recsearch has no kind for, and
a few broken models. Weights are initializers filled with zeros: only their
shapes matter. Run with /usr/bin/python3 (the Debian interpreter that sees
python3-onnx); the output is deterministic.

    /usr/bin/python3 tools/onnx/make_test_models.py [OUTDIR]
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def weight(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.zeros(shape, dtype=dtype), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(graph, opset, check=True):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="recsearch-tests")
    m.ir_version = 8 if opset >= 15 else 7
    if check:
        onnx.checker.check_model(m)
    return m


def mlp():
    """MLP 256-128-10, symbolic batch N, opset 13: Gemm with bias, Relu,
    Softmax. w2 lives in an external-data file that is not shipped: the
    importer must not need it."""
    x = helper.make_tensor_value_info("x", F32, ["N", 256])
    y = helper.make_tensor_value_info("y", F32, ["N", 10])
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1"),
        helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], name="fc2", transB=1),
        helper.make_node("Softmax", ["h2"], ["y"], name="softmax", axis=-1),
    ]
    w2 = TensorProto(name="w2", data_type=F32, dims=[10, 128])
    w2.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "mlp_weights.bin"), ("offset", "0"), ("length", "5120")):
        entry = w2.external_data.add()
        entry.key, entry.value = key, value
    inits = [weight("w1", [256, 128]), weight("b1", [128]), w2, weight("b2", [10])]
    return model(helper.make_graph(nodes, "mlp", [x], [y], inits), 13, check=False)


def transformer_block():
    """Pre-LN transformer block, batch 2, seq 16, hidden 64, 4 heads, opset 17."""
    B, S, H, NH = 2, 16, 64, 4
    D = H // NH
    x = helper.make_tensor_value_info("x", F32, [B, S, H])
    y = helper.make_tensor_value_info("y", F32, [B, S, H])
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "ln1_g", "ln1_b"], ["ln1"], name="ln1", axis=-1, epsilon=1e-5),
        n("MatMul", ["ln1", "wq"], ["q0"], name="q_proj"),
        n("MatMul", ["ln1", "wk"], ["k0"], name="k_proj"),
        n("MatMul", ["ln1", "wv"], ["v0"], name="v_proj"),
        n("Reshape", ["q0", "heads_shape"], ["q1"], name="q_split"),
        n("Reshape", ["k0", "heads_shape"], ["k1"], name="k_split"),
        n("Reshape", ["v0", "heads_shape"], ["v1"], name="v_split"),
        n("Transpose", ["q1"], ["q"], name="q_t", perm=[0, 2, 1, 3]),
        n("Transpose", ["k1"], ["kt"], name="k_t", perm=[0, 2, 3, 1]),
        n("Transpose", ["v1"], ["v"], name="v_t", perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["scores0"], name="qk"),
        n("Div", ["scores0", "scale"], ["scores"], name="scale"),
        n("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        n("MatMul", ["probs", "v"], ["ctx0"], name="pv"),
        n("Transpose", ["ctx0"], ["ctx1"], name="ctx_t", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "merge_shape"], ["ctx"], name="merge"),
        n("MatMul", ["ctx", "wo"], ["attn"], name="o_proj"),
        n("Add", ["x", "attn"], ["r1"], name="residual1"),
        n("LayerNormalization", ["r1", "ln2_g", "ln2_b"], ["ln2"], name="ln2", axis=-1),
        n("MatMul", ["ln2", "w_up"], ["up"], name="ffn_up"),
        n("Add", ["up", "b_up"], ["up_b"], name="ffn_up_bias"),
        n("Relu", ["up_b"], ["act"], name="ffn_act"),
        n("MatMul", ["act", "w_down"], ["down"], name="ffn_down"),
        n("Add", ["r1", "down"], ["y"], name="residual2"),
    ]
    inits = [weight("ln1_g", [H]), weight("ln1_b", [H]), weight("wq", [H, H]),
             weight("wk", [H, H]), weight("wv", [H, H]), weight("wo", [H, H]),
             ints("heads_shape", [B, S, NH, D]), ints("merge_shape", [B, S, H]),
             numpy_helper.from_array(np.array(4.0, dtype=np.float32), "scale"),
             weight("ln2_g", [H]), weight("ln2_b", [H]), weight("w_up", [H, 4 * H]),
             weight("b_up", [4 * H]), weight("w_down", [4 * H, H])]
    return model(helper.make_graph(nodes, "transformer_block", [x], [y], inits), 17)


def convnet():
    """Small CNN, batch 8, 3x32x32, opset 11: Conv (pads, auto_pad, group),
    BatchNormalization, MaxPool, AveragePool, GlobalAveragePool, Flatten, Gemm."""
    x = helper.make_tensor_value_info("image", F32, [8, 3, 32, 32])
    y = helper.make_tensor_value_info("logits", F32, [8, 10])
    n = helper.make_node
    nodes = [
        n("Conv", ["image", "c1_w", "c1_b"], ["c1"], name="conv1", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["b1"], name="bn1",
          epsilon=1e-5),
        n("Relu", ["b1"], ["r1"], name="relu1"),
        n("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "c2_w"], ["c2"], name="conv2_grouped", kernel_shape=[3, 3],
          auto_pad="SAME_UPPER", group=4),
        n("Relu", ["c2"], ["r2"], name="relu2"),
        n("AveragePool", ["r2"], ["p2"], name="pool2", kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 1]),
        n("GlobalAveragePool", ["p2"], ["g"], name="gap"),
        n("Flatten", ["g"], ["f"], name="flatten", axis=1),
        n("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    inits = [weight("c1_w", [16, 3, 3, 3]), weight("c1_b", [16]), weight("bn1_s", [16]),
             weight("bn1_b", [16]), weight("bn1_m", [16]), weight("bn1_v", [16]),
             weight("c2_w", [32, 4, 3, 3]), weight("fc_w", [10, 32]), weight("fc_b", [10])]
    return model(helper.make_graph(nodes, "convnet", [x], [y], inits), 11)


def shapes13():
    """Shape computations and axes-as-inputs (opset 13), an embedding, Split,
    Slice, Squeeze/Unsqueeze, ReduceSum, Cast, Dropout, Erf (no recsearch
    kind but elementwise), TopK and a 1-D convolution (no kind: replicated)."""
    n = helper.make_node
    tok = helper.make_tensor_value_info("tokens", I64, ["batch", "seq"])
    seq1d = helper.make_tensor_value_info("signal", F32, [4, 8, 100])
    outs = [helper.make_tensor_value_info("pooled", F32, ["batch", 8]),
            helper.make_tensor_value_info("top_values", F32, ["batch", "seq", 2]),
            helper.make_tensor_value_info("conv1d_out", F32, [4, 6, 98])]
    nodes = [
        n("Gather", ["embedding", "tokens"], ["emb"], name="embed", axis=0),       # [b, s, 32]
        n("Shape", ["emb"], ["emb_shape"], name="shape"),
        n("Gather", ["emb_shape", "zero"], ["b_dim"], name="take_batch", axis=0),
        n("Unsqueeze", ["b_dim", "axes0"], ["b_dim1"], name="b_unsq"),
        n("Concat", ["b_dim1", "minus1_32"], ["flat_shape"], name="shape_concat", axis=0),
        n("Reshape", ["emb", "flat_shape"], ["flat"], name="flatten_tokens"),    # [b, s*32]
        n("Split", ["emb", "split_sizes"], ["left", "right"], name="split", axis=2),  # 16+16
        n("Slice", ["left", "sl_starts", "sl_ends", "sl_axes"], ["sliced"], name="slice"),  # [b, s, 8]
        n("Unsqueeze", ["sliced", "axes0"], ["unsq"], name="unsqueeze"),         # [1, b, s, 8]
        n("Squeeze", ["unsq", "axes0"], ["sq"], name="squeeze"),                 # [b, s, 8]
        n("ReduceSum", ["sq", "axes1"], ["summed"], name="reduce_seq", keepdims=0),  # [b, 8]
        n("Cast", ["summed"], ["summed16"], name="to_half", to=TensorProto.FLOAT16),
        n("Cast", ["summed16"], ["summed32"], name="to_float", to=F32),
        n("Dropout", ["summed32"], ["dropped"], name="dropout"),
        n("Erf", ["dropped"], ["pooled"], name="erf"),
        n("TopK", ["right", "k2"], ["top_values", "top_idx"], name="topk", axis=-1),
        n("Conv", ["signal", "c1d_w"], ["conv1d_out"], name="conv1d", kernel_shape=[3]),
    ]
    inits = [weight("embedding", [1000, 32]), ints("zero", 0), ints("axes0", [0]),
             ints("axes1", [1]), ints("minus1_32", [-1]), ints("split_sizes", [16, 16]),
             ints("sl_starts", [0]), ints("sl_ends", [8]), ints("sl_axes", [2]), ints("k2", [2]),
             weight("c1d_w", [6, 8, 3])]
    # minus1_32 is [-1]: the reshape target is [batch, -1].
    return model(helper.make_graph(nodes, "shapes13", [tok, seq1d], outs, inits), 13)


def legacy9():
    """Opset 9: Softmax over axis 1 of a 3-D tensor (flattening semantics:
    no recsearch kind), Unsqueeze/Squeeze/ReduceMean with axes attributes."""
    n = helper.make_node
    x = helper.make_tensor_value_info("x", F32, [4, 6, 5])
    y = helper.make_tensor_value_info("y", F32, [4, 6, 5])
    z = helper.make_tensor_value_info("z", F32, [4, 6, 1])
    nodes = [
        n("Softmax", ["x"], ["s"], name="softmax_flat", axis=1),
        n("Unsqueeze", ["s"], ["u"], name="unsqueeze", axes=[0]),
        n("Squeeze", ["u"], ["y"], name="squeeze", axes=[0]),
        n("ReduceMean", ["x"], ["z"], name="mean", axes=[2], keepdims=1),
    ]
    return model(helper.make_graph(nodes, "legacy9", [x], [y, z]), 9)


def bad_conv():
    """Broken on purpose: the weight has 4 input channels, the image 3."""
    x = helper.make_tensor_value_info("image", F32, [2, 3, 8, 8])
    y = helper.make_tensor_value_info("y", F32, None)
    nodes = [helper.make_node("Relu", ["image"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w"], ["y"], name="conv_bad", kernel_shape=[3, 3])]
    return model(helper.make_graph(nodes, "bad_conv", [x], [y], [weight("w", [8, 4, 3, 3])]), 13,
                 check=False)


def dangling():
    """Broken on purpose: a node reads a tensor nobody defines."""
    x = helper.make_tensor_value_info("x", F32, [2, 3])
    y = helper.make_tensor_value_info("y", F32, [2, 3])
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")]
    return model(helper.make_graph(nodes, "dangling", [x], [y]), 13, check=False)


MODELS = {
    "mlp_opset13": mlp, "transformer_block_opset17": transformer_block,
    "convnet_opset11": convnet, "shapes_opset13": shapes13, "legacy_opset9": legacy9,
    "bad_conv": bad_conv, "dangling_input": dangling,
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "onnx", "models")
    os.makedirs(out, exist_ok=True)
    for name, make in MODELS.items():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(make().SerializeToString())
    print("wrote %d models to %s" % (len(MODELS), os.path.normpath(out)))


if __name__ == "__main__":
    main()
