#!/usr/bin/env python3
"""cudnn-frontend 1.32 as an oracle for cudnn-graph's structural JSON and plan payloads.

Deviceless: the C++ graph gets a device-properties JSON (tests/fixtures/h200-devprop.json by
default) instead of a handle, so validate, build_operation_graph, create_execution_plans and
build_plans run against real cuDNN with the libcuda stand-in (.ci/setup-cudnn.sh); check_support
and SDPA's validate query the device and fail. Needs only the standard library and `cudnn`
(.ci/setup-frontend.sh installs it and prints PYTHONPATH and LD_LIBRARY_PATH).

  oracle.py reprint FILE...    deserialize each structural JSON, lower and plan it; print one JSON
                               line per file: {"ok": true, "json": <cudnn-frontend's re-print>}
                               or {"ok": false, "stage": <step>, "error": <its exact message>}
  oracle.py load FILE...       deserialize each plan payload (bytes) into a graph; print one JSON
                               line per file: {"ok": true, "workspace_size": <its execute's
                               workspace: its own front part and cuDNN's>} or {"ok": false,
                               "stage", "error"}
  oracle.py fixtures DIR       build a graph of each family with cudnn-frontend's API and write
                               DIR/<family>.json (its structural JSON), DIR/<family>.ubjson (its
                               plan payload, where it plans deviceless) and DIR/manifest.json (what
                               was written, and each failing step's exact error)

`--devprop FILE` chooses the device properties. Exit status 0 unless the arguments are wrong or
cudnn cannot be imported (status 3: the Rust test skips on it).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DEVPROP = os.path.join(HERE, "..", "fixtures", "h200-devprop.json")

try:
    import cudnn  # noqa: E402

    M = cudnn._pybind_module
except Exception as e:  # the oracle is absent: say so, the caller decides
    print(json.dumps({"ok": False, "stage": "import", "error": f"{type(e).__name__}: {e}"}))
    sys.exit(3)


def device_properties(path):
    with open(path, encoding="utf-8") as f:
        return M.create_device_properties(f.read())


def new_graph(devprop, name, io=None):
    kwargs = dict(name=name, device_property=devprop,
                  intermediate_data_type=M.data_type.FLOAT, compute_data_type=M.data_type.FLOAT)
    if io is not None:
        kwargs["io_data_type"] = io
    return M.backend_graph(**kwargs)


def plan(g):
    """Lowers and plans `g`, step by step; returns (None, None) or (stage, exact error)."""
    steps = [
        ("validate", g.validate),
        ("build_operation_graph", g.build_operation_graph),
        ("create_execution_plans", lambda: g.create_execution_plans([M.heur_mode.A, M.heur_mode.FALLBACK])),
        ("build_plans", g.build_plans),
    ]
    for stage, step in steps:
        try:
            step()
        except Exception as e:
            return stage, str(e)
    return None, None


def reprint(path, devprop):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    g = M.backend_graph(device_property=devprop)
    try:
        g.deserialize(text)
    except Exception as e:
        return {"ok": False, "stage": "deserialize", "error": str(e)}
    stage, error = plan(g)
    if stage is not None:
        return {"ok": False, "stage": stage, "error": error}
    return {"ok": True, "json": json.loads(repr(g))}


def load(path, devprop):
    with open(path, "rb") as f:
        data = f.read()
    g = M.backend_graph(device_property=devprop)
    try:
        g.deserialize(data)
    except Exception as e:
        return {"ok": False, "stage": "deserialize", "error": str(e)}
    try:
        workspace = g.get_workspace_size()
    except Exception as e:
        return {"ok": False, "stage": "get_workspace_size", "error": str(e)}
    return {"ok": True, "workspace_size": workspace}


# ---- one graph per family, with cudnn-frontend's API -------------------------------------------

H, F = None, None  # set in main (the enum needs the module)


def packed(dims):
    strides, acc = [], 1
    for d in reversed(dims):
        strides.insert(0, acc)
        acc *= d
    return strides


def nhwc(dims):
    n, c, h, w = dims
    return [c * h * w, 1, w * c, c]


def t(g, name, dims, dtype, stride=None, by_value=False):
    return g.tensor(name=name, dim=dims, stride=stride or packed(dims), data_type=dtype, is_pass_by_value=by_value)


def out(x, dtype, name=None):
    x.set_output(True).set_data_type(dtype)
    if name:
        x.set_name(name)
    return x


def eps(g):
    return t(g, "epsilon", [1, 1, 1, 1], M.data_type.FLOAT, by_value=True)


def fam_matmul(g):
    a = t(g, "a", [1, 64, 32], M.data_type.HALF)
    b = t(g, "b", [1, 32, 16], M.data_type.HALF)
    out(g.matmul(a, b, name="mm"), M.data_type.HALF, "c")


def pointwise_binary(g, op, name):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    b = t(g, "b", [1, 8, 16], M.data_type.FLOAT)
    out(getattr(g, op)(a, b, name=name), M.data_type.FLOAT, "y")


def fam_pointwise_add(g):
    pointwise_binary(g, "add", "add")


def fam_pointwise_relu(g):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    out(g.relu(a, name="relu"), M.data_type.FLOAT, "y")


def fam_pointwise_leaky_relu(g):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    out(g.leaky_relu(a, negative_slope=0.25, name="lrelu"), M.data_type.FLOAT, "y")


def fam_pointwise_mul_by_value(g):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    s = t(g, "s", [1, 1, 1], M.data_type.FLOAT, by_value=True)
    out(g.mul(a, s, name="mul"), M.data_type.FLOAT, "y")


def fam_pointwise_cmp_gt(g):
    pointwise_binary(g, "cmp_gt", "gt")


def fam_reduction(g):
    x = t(g, "x", [4, 32, 8, 8], M.data_type.FLOAT, stride=nhwc([4, 32, 8, 8]))
    y = g.reduction(x, mode=M.reduction_mode.ADD, name="sum")
    out(y, M.data_type.FLOAT, "y").set_dim([1, 32, 1, 1]).set_stride([32, 1, 32, 32])


def norm_inputs(g, scale_dims):
    x = t(g, "x", [4, 32, 1, 1], M.data_type.FLOAT)
    scale = t(g, "scale", scale_dims, M.data_type.FLOAT)
    bias = t(g, "bias", scale_dims, M.data_type.FLOAT)
    return x, scale, bias


def fam_layernorm(g):
    x, scale, bias = norm_inputs(g, [1, 32, 1, 1])
    y, mean, inv = g.layernorm(M.norm_forward_phase.TRAINING, x, scale=scale, bias=bias, epsilon=eps(g), name="ln")
    out(y, M.data_type.FLOAT, "y")
    out(mean, M.data_type.FLOAT, "mean")
    out(inv, M.data_type.FLOAT, "inv_variance")


def fam_rmsnorm(g):
    x, scale, _ = norm_inputs(g, [1, 32, 1, 1])
    y, inv = g.rmsnorm(M.norm_forward_phase.TRAINING, x, scale=scale, epsilon=eps(g), name="rms")
    out(y, M.data_type.FLOAT, "y")
    out(inv, M.data_type.FLOAT, "inv_variance")


def fam_batchnorm(g):
    x = t(g, "x", [4, 32, 8, 8], M.data_type.HALF, stride=nhwc([4, 32, 8, 8]))
    c = [1, 32, 1, 1]
    scale, bias = t(g, "scale", c, M.data_type.FLOAT), t(g, "bias", c, M.data_type.FLOAT)
    rm, rv = t(g, "running_mean", c, M.data_type.FLOAT), t(g, "running_var", c, M.data_type.FLOAT)
    momentum = t(g, "momentum", [1, 1, 1, 1], M.data_type.FLOAT, by_value=True)
    y, mean, inv, nrm, nrv = g.batchnorm(x, scale, bias, rm, rv, eps(g), momentum, name="bn")
    out(y, M.data_type.HALF, "y")
    for v, n in ((mean, "mean"), (inv, "inv_variance"), (nrm, "next_running_mean"), (nrv, "next_running_var")):
        out(v, M.data_type.FLOAT, n)


def fam_batchnorm_inference(g):
    x = t(g, "x", [4, 32, 8, 8], M.data_type.HALF, stride=nhwc([4, 32, 8, 8]))
    c = [1, 32, 1, 1]
    ts = [t(g, n, c, M.data_type.FLOAT) for n in ("mean", "inv_variance", "scale", "bias")]
    out(g.batchnorm_inference(x, *ts, name="bn_inf"), M.data_type.HALF, "y")


def fam_instancenorm(g):
    x = t(g, "x", [4, 32, 8, 8], M.data_type.HALF, stride=nhwc([4, 32, 8, 8]))
    c = [1, 32, 1, 1]
    scale, bias = t(g, "scale", c, M.data_type.FLOAT), t(g, "bias", c, M.data_type.FLOAT)
    y, mean, inv = g.instancenorm(M.norm_forward_phase.TRAINING, x, scale, bias, eps(g), name="in")
    out(y, M.data_type.HALF, "y")
    out(mean, M.data_type.FLOAT, "mean")
    out(inv, M.data_type.FLOAT, "inv_variance")


def fam_genstats(g):
    x = t(g, "x", [4, 32, 8, 8], M.data_type.HALF, stride=nhwc([4, 32, 8, 8]))
    s, sq = g.genstats(x, name="gs")
    out(s, M.data_type.FLOAT, "sum").set_dim([1, 32, 1, 1]).set_stride([32, 1, 32, 32])
    out(sq, M.data_type.FLOAT, "sq_sum").set_dim([1, 32, 1, 1]).set_stride([32, 1, 32, 32])


def fam_layernorm_backward(g):
    x, scale, _ = norm_inputs(g, [1, 32, 1, 1])
    dy = t(g, "dy", [4, 32, 1, 1], M.data_type.FLOAT)
    mean, inv = t(g, "mean", [4, 1, 1, 1], M.data_type.FLOAT), t(g, "inv_variance", [4, 1, 1, 1], M.data_type.FLOAT)
    dx, dscale, dbias = g.layernorm_backward(dy, x, scale=scale, mean=mean, inv_variance=inv, name="ln_bwd")
    out(dx, M.data_type.FLOAT, "dx")
    out(dscale, M.data_type.FLOAT, "dscale")
    out(dbias, M.data_type.FLOAT, "dbias")


def fam_rmsnorm_backward(g):
    x, scale, _ = norm_inputs(g, [1, 32, 1, 1])
    dy = t(g, "dy", [4, 32, 1, 1], M.data_type.FLOAT)
    inv = t(g, "inv_variance", [4, 1, 1, 1], M.data_type.FLOAT)
    dx, dscale, dbias = g.rmsnorm_backward(dy, x, scale=scale, inv_variance=inv, has_dbias=False, name="rms_bwd")
    out(dx, M.data_type.FLOAT, "dx")
    out(dscale, M.data_type.FLOAT, "dscale")


def fam_batchnorm_backward(g):
    dims, c = [4, 32, 8, 8], [1, 32, 1, 1]
    x = t(g, "x", dims, M.data_type.HALF, stride=nhwc(dims))
    dy = t(g, "dy", dims, M.data_type.HALF, stride=nhwc(dims))
    scale, mean, inv = (t(g, n, c, M.data_type.FLOAT) for n in ("scale", "mean", "inv_variance"))
    dx, dscale, dbias = g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv, name="bn_bwd")
    out(dx, M.data_type.HALF, "dx")
    out(dscale, M.data_type.FLOAT, "dscale")
    out(dbias, M.data_type.FLOAT, "dbias")


def conv_tensors(g):
    x = t(g, "x", [1, 16, 8, 8], M.data_type.HALF, stride=nhwc([1, 16, 8, 8]))
    w = t(g, "w", [32, 16, 3, 3], M.data_type.HALF, stride=nhwc([32, 16, 3, 3]))
    dy = t(g, "dy", [1, 32, 8, 8], M.data_type.HALF, stride=nhwc([1, 32, 8, 8]))
    return x, w, dy


def fam_conv_fprop(g):
    x, w, _ = conv_tensors(g)
    out(g.conv_fprop(x, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="conv"), M.data_type.HALF, "y")


def fam_conv_dgrad(g):
    _, w, dy = conv_tensors(g)
    dx = g.conv_dgrad(dy, w, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="dgrad")
    out(dx, M.data_type.HALF, "dx").set_dim([1, 16, 8, 8]).set_stride(nhwc([1, 16, 8, 8]))


def fam_conv_wgrad(g):
    x, _, dy = conv_tensors(g)
    dw = g.conv_wgrad(x, dy, padding=[1, 1], stride=[1, 1], dilation=[1, 1], name="wgrad")
    out(dw, M.data_type.HALF, "dw").set_dim([32, 16, 3, 3]).set_stride(nhwc([32, 16, 3, 3]))


def fam_reshape(g):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    r = g.reshape(a, name="reshape")
    r.set_dim([1, 128, 1]).set_stride([128, 1, 1])
    out(g.relu(r, name="relu"), M.data_type.FLOAT, "y")


def fam_transpose(g):
    a = t(g, "a", [1, 8, 16], M.data_type.FLOAT)
    out(g.transpose(a, [0, 2, 1], name="transpose"), M.data_type.FLOAT, "y")


def fam_slice(g):
    a = t(g, "a", [1, 8, 16], M.data_type.HALF)
    s = g.slice(a, [slice(0, 1), slice(0, 4), slice(0, 16)], name="slice")
    out(s, M.data_type.HALF, "y")


def fam_concatenate(g):
    a = t(g, "a", [1, 8, 16], M.data_type.HALF)
    b = t(g, "b", [1, 8, 16], M.data_type.HALF)
    out(g.concatenate([a, b], axis=1, name="concat"), M.data_type.HALF, "y")


def sdpa_tensors(g):
    b, h, s, d = 1, 2, 128, 64
    q = t(g, "q", [b, h, s, d], M.data_type.HALF)
    k = t(g, "k", [b, h, s, d], M.data_type.HALF)
    v = t(g, "v", [b, h, s, d], M.data_type.HALF)
    return q, k, v, [b, h, s, d]


def fam_sdpa_forward(g):
    q, k, v, dims = sdpa_tensors(g)
    o, stats = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, use_causal_mask=True, name="sdpa")
    out(o, M.data_type.HALF, "o").set_dim(dims).set_stride(packed(dims))
    out(stats, M.data_type.FLOAT, "stats")


def fam_sdpa_backward(g):
    q, k, v, dims = sdpa_tensors(g)
    o = t(g, "o", dims, M.data_type.HALF)
    do = t(g, "do", dims, M.data_type.HALF)
    stats = t(g, "stats", dims[:3] + [1], M.data_type.FLOAT)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.125, use_causal_mask=True, name="sdpa_bwd")
    for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv")):
        out(x, M.data_type.HALF, n).set_dim(dims).set_stride(packed(dims))


def thd(dims):
    """THD strides of a packed [b, h, s, d] tensor: token-major."""
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1]


def ragged_tensors(g):
    """Packed Q, K, V (THD), their offsets and O's, and the sequence lengths."""
    b, h, s, d = 3, 2, 128, 64
    dims = [b, h, s, d]
    offsets = {n: t(g, "ragged_offset_" + n, [b + 1, 1, 1, 1], M.data_type.INT32) for n in "qkvo"}
    qkv = []
    for n in "qkv":
        x = t(g, n, dims, M.data_type.HALF, stride=thd(dims))
        x.set_ragged_offset(offsets[n])
        qkv.append(x)
    lens = [t(g, n, [b, 1, 1, 1], M.data_type.INT32) for n in ("seq_len_q", "seq_len_kv")]
    return qkv, offsets, lens, dims


def fam_sdpa_ragged_forward(g):
    (q, k, v), offsets, (sq, skv), dims = ragged_tensors(g)
    o, stats = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, use_causal_mask=True,
                      use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv, name="sdpa")
    out(o, M.data_type.HALF, "o").set_dim(dims).set_stride(thd(dims)).set_ragged_offset(offsets["o"])
    out(stats, M.data_type.FLOAT, "stats")


def fam_sdpa_ragged_backward(g):
    (q, k, v), offsets, (sq, skv), dims = ragged_tensors(g)
    o = t(g, "o", dims, M.data_type.HALF, stride=thd(dims))
    o.set_ragged_offset(offsets["o"])
    do = t(g, "do", dims, M.data_type.HALF, stride=thd(dims))
    do.set_ragged_offset(offsets["o"])
    stats = t(g, "stats", dims[:3] + [1], M.data_type.FLOAT)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.125, use_causal_mask=True,
                                 use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv, name="sdpa_bwd")
    for x, n in ((dq, "q"), (dk, "k"), (dv, "v")):
        out(x, M.data_type.HALF, "d" + n).set_dim(dims).set_stride(thd(dims)).set_ragged_offset(offsets[n])


FAMILIES = {name[4:]: f for name, f in globals().items() if name.startswith("fam_")}
# Families cudnn-frontend's Python API has no call for (recorded in the manifest as such).
UNBOUND = {"resample": "cudnn-frontend 1.32's Python backend_graph has no resample/pooling call"}


def fixtures(dirname, devprop):
    os.makedirs(dirname, exist_ok=True)
    manifest = {}
    for family, build in FAMILIES.items():
        entry = {}
        g = new_graph(devprop, family)
        try:
            build(g)
        except Exception as e:
            entry["error"] = {"stage": "build", "message": str(e)}
            manifest[family] = entry
            continue
        stage, error = plan(g)
        try:
            text = repr(g)
            json.loads(text)
            with open(os.path.join(dirname, family + ".json"), "w", encoding="utf-8") as f:
                f.write(text + "\n")
            entry["json"] = family + ".json"
        except Exception as e:
            entry["json_error"] = str(e)
        if stage is not None:
            entry["error"] = {"stage": stage, "message": error}
        else:
            try:
                blob = g.serialize(as_bytes=True)
                with open(os.path.join(dirname, family + ".ubjson"), "wb") as f:
                    f.write(bytes(blob))
                entry["payload"] = family + ".ubjson"
            except Exception as e:
                entry["error"] = {"stage": "serialize", "message": str(e)}
        manifest[family] = entry
    for family, why in UNBOUND.items():
        manifest[family] = {"error": {"stage": "build", "message": why}}
    manifest = dict(sorted(manifest.items()))
    doc = {"cudnn_frontend": cudnn.__version__, "cudnn": M.backend_version(), "families": manifest}
    with open(os.path.join(dirname, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    return doc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devprop", default=DEFAULT_DEVPROP)
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("reprint").add_argument("files", nargs="+")
    sub.add_parser("load").add_argument("files", nargs="+")
    sub.add_parser("fixtures").add_argument("dir")
    args = parser.parse_args()
    devprop = device_properties(args.devprop)
    if args.mode in ("reprint", "load"):
        run = reprint if args.mode == "reprint" else load
        for path in args.files:
            print(json.dumps(run(path, devprop), sort_keys=True), flush=True)
    else:
        doc = fixtures(args.dir, devprop)
        for family, entry in doc["families"].items():
            print(f"{family}: {entry}", file=sys.stderr)


if __name__ == "__main__":
    main()
