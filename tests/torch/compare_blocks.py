#!/usr/bin/env python3
"""Computes the partition blocks of tests/gpu_suite/gpu_partition.rs in PyTorch and compares our GPU outputs.

    CUDNN_GRAPH_DUMP_DIR=DIR .gpu-bundle/tests/gpu_suite gpu_partition
    python3 tests/torch/compare_blocks.py DIR [--json PATH]

The Rust test writes, for each block case, `CASE.json` (the block, its parameters, cudnn-frontend's
tolerance for the output type, and every tensor's name, role, dtype, dims and strides in elements)
and one raw little-endian file per tensor: the inputs it generated and the output our partitioned
plan computed on the GPU. Here each block is computed with PyTorch on CUDA from the same inputs, in
their stored types as a PyTorch model would run them (bf16/f16 tensors, fp32 accumulation, each
op's result rounded to the tensor type), and in fp32 as a reference for both:

  mlp          y = gelu(x·W1 + b1)·W2 + b2 + x             (erf GELU: the DSL's `gelu` is GELU_FWD)
  norm_linear  y = rmsnorm(x, g, eps)·W
  res_block    y = conv(relu((conv(x, W1) − mean)·inv_var·scale + bias), W2) + x   (channels-last,
               3×3, padding 1: batch-norm inference written out, as the graph declares it)
  attention    rmsnorm → Q/K/V projections → causal GQA SDPA (scale 1/sqrt(D)) → output projection
               + x

It prints, per case, our output against PyTorch's (largest |difference|, that over the largest
|PyTorch value|, the norm-wise relative error, and the elements outside atol + rtol·|PyTorch|), and
each against the fp32 computation. Exits 1 when an element is outside the tolerance or the
relative error exceeds 2e-2 (the Rust tests' bounds), or a case fails. Needs torch with CUDA only.
"""

import argparse
import glob
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
RELATIVE_BOUND = 2e-2


def load(case_dir, t):
    """A tensor of the manifest on the GPU: its logical dims over its stored strides."""
    with open(os.path.join(case_dir, t["file"]), "rb") as f:
        flat = torch.frombuffer(bytearray(f.read()), dtype=DTYPES[t["dtype"]]).cuda()
    return torch.as_strided(flat, t["dims"], t["strides"])


def rmsnorm(x, g, eps):
    """RMS norm over the last dim, PyTorch's own where it has one."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight=g.reshape(-1), eps=eps)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g.float()
    return y.to(x.dtype)


def sdpa_gqa(q, k, v, causal, scale):
    """Grouped-query attention: query head h reads key/value head h // (HQ / HKV)."""
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
    except TypeError:  # torch < 2.5: no enable_gqa
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def mlp(t, p):
    h = F.gelu(torch.matmul(t["x"], t["w1"]) + t["b1"])
    return torch.matmul(h, t["w2"]) + t["b2"] + t["x"]


def norm_linear(t, p):
    return torch.matmul(rmsnorm(t["x"], t["g"], p["eps"]), t["w"])


def res_block(t, p):
    pad = p["padding"]
    c = F.conv2d(t["x"], t["w1"], padding=pad)
    a = torch.relu((c - t["mean"]) * t["inv_var"] * t["scale"] + t["bias"]).to(t["x"].dtype)
    return F.conv2d(a, t["w2"], padding=pad) + t["x"]


def attention(t, p):
    b, s, hq, hkv, d = p["B"], p["S"], p["HQ"], p["HKV"], p["D"]
    x = t["x"]
    h = rmsnorm(x, t["g"], p["eps"])

    def heads(w, n):
        return torch.matmul(h, w).view(b, s, n, d).transpose(1, 2)

    q, k, v = heads(t["wq"], hq), heads(t["wk"], hkv), heads(t["wv"], hkv)
    o = sdpa_gqa(q, k, v, p["causal"], 1.0 / math.sqrt(d))
    merged = o.transpose(1, 2).reshape(1, b * s, hq * d)
    return torch.matmul(merged, t["wo"]) + x


BLOCKS = {"mlp": mlp, "norm_linear": norm_linear, "res_block": res_block, "attention": attention}


class fp32_math:
    """fp32 in full fp32 (no TF32 in cuBLAS or cuDNN)."""

    def __enter__(self):
        self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.saved


def errors(got, want, atol, rtol):
    got, want = got.double(), want.double()
    diff = (got - want).abs()
    outside = (~(diff <= atol + rtol * want.abs())).sum().item()  # NaN counts as outside
    scale = want.abs().max().item()
    max_abs = diff.max().item() if not torch.isnan(diff).any() else math.inf
    norm = want.norm().item()
    return {
        "max_abs": max_abs,
        "max_rel": max_abs / scale if scale > 0 else math.inf,
        "rel_err": (got - want).norm().item() / norm if norm > 0 else math.inf,
        "outside": outside,
        "n": got.numel(),
    }


def run_case(case_dir, manifest):
    tensors, ours = {}, None
    for t in manifest["tensors"]:
        if t["role"] == "input":
            tensors[t["name"]] = load(case_dir, t)
        else:
            ours = load(case_dir, t)
    block, params = BLOCKS[manifest["block"]], manifest["params"]
    theirs = block(tensors, params)
    with fp32_math():
        exact = block({n: v.float() for n, v in tensors.items()}, params)
    torch.cuda.synchronize()
    atol, rtol = manifest["atol"], manifest["rtol"]
    row = {
        "case": manifest["case"],
        "block": manifest["block"],
        "atol": atol,
        "rtol": rtol,
        "ours_vs_torch": errors(ours, theirs, atol, rtol),
        "ours_vs_fp32": errors(ours, exact, atol, rtol),
        "torch_vs_fp32": errors(theirs, exact, atol, rtol),
    }
    vs = row["ours_vs_torch"]
    row["ok"] = vs["outside"] == 0 and vs["rel_err"] <= RELATIVE_BOUND
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default=os.environ.get("CUDNN_GRAPH_DUMP_DIR"),
                    help="the folder tests/gpu_suite/gpu_partition.rs wrote (default: $CUDNN_GRAPH_DUMP_DIR)")
    ap.add_argument("--json", help="also write every row to this file")
    args = ap.parse_args()
    if not args.dir:
        ap.error("give the dump folder (or set CUDNN_GRAPH_DUMP_DIR)")
    manifests = sorted(glob.glob(os.path.join(args.dir, "*.json")))
    if not manifests:
        print(f"no case manifests in {args.dir}: run tests/gpu_suite/gpu_partition.rs with CUDNN_GRAPH_DUMP_DIR set first")
        return 1
    print(f"# torch {torch.__version__}, cuDNN (torch) {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    rows, failed = [], 0
    for path in manifests:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        try:
            row = run_case(args.dir, manifest)
        except Exception as e:  # one broken case must not hide the others' figures
            row = {"case": manifest.get("case", path), "error": repr(e)[:400], "ok": False}
        rows.append(row)
        if "error" in row:
            print(f"{row['case']}: FAILED: {row['error']}")
        else:
            v, o, t = row["ours_vs_torch"], row["ours_vs_fp32"], row["torch_vs_fp32"]
            print(f"{row['case']}: ours vs torch: max |diff| {v['max_abs']:.3e}, over max |torch| {v['max_rel']:.3e}, "
                  f"relative {v['rel_err']:.3e}, {v['outside']} of {v['n']} outside atol {row['atol']:.0e} + "
                  f"rtol {row['rtol']:.0e}·|torch|; vs fp32: ours {o['rel_err']:.3e}, torch {t['rel_err']:.3e}"
                  f"{'' if row['ok'] else '  <-- beyond tolerance'}")
        failed += not row["ok"]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    print(f"{len(rows) - failed} of {len(rows)} cases within tolerance")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
