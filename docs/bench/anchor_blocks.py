#!/usr/bin/env python3
"""PyTorch anchors for the `partition` section of examples/bench.rs: the transformer MLP and the
pre-norm attention block at the same shapes, timed the same way, in PyTorch eager and (where it
works on the machine) torch.compile.

    python3 docs/bench/anchor_blocks.py [--json PATH] [--ours BENCH.jsonl] [--decode-s S]

Blocks (bf16, fp32 accumulation as PyTorch does by default):
  mlp        y = gelu(x·W1 + b1)·W2 + b2 + x, E = 4096, F = 16384 (erf GELU), weights in
             nn.Linear's layout through F.linear
  attention  rmsnorm → Q/K/V projections → causal GQA SDPA (32 query heads of 128 over 8
             key/value heads, enable_gqa) → output projection + x
Shapes: prefill T = B·S = 4096 (B = 1); decode B = 1 with the MLP at T = 1 and the attention at
S = --decode-s (default: the S our bench used, read from --ours, else 1).

Timing: `gpu_ms` is CUDA events around one call (median of 50 after warm-up); `gpu_ms_batched`
is the median over 20 samples of (CUDA-event time of N back-to-back calls) / N, N sized so a
sample lasts about 500 µs — the method of shared/bench/anchor_cudnn_frontend.py's
`gpu_time_ms_batched` and close to the project's own bench. Compare our `gpu_ms` with
`gpu_ms_batched`. torch.compile failures (no compiler on the machine, say) are recorded as rows
with `error`. With --ours, a table of our partitioned and hand-split figures beside these is
printed at the end. Needs torch with CUDA only.
"""
import argparse
import json
import math
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

DEV = "cuda"
E, FF, HEADS, KV_HEADS, D = 4096, 16384, 32, 8, 128
results = []


def gpu_time_ms(fn, reps=50, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def gpu_time_ms_batched(fn, target_ms=0.5, samples=20):
    """Median per-call device time over batches of back-to-back calls (about target_ms each)."""
    single = gpu_time_ms(fn, reps=10, warmup=3)
    n = max(1, min(1000, int(target_ms / max(single, 1e-4))))
    times = []
    for _ in range(samples):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record(); e.synchronize()
        times.append(s.elapsed_time(e) / n)
    return statistics.median(times), n


def timed(fn, flops, nbytes):
    t = gpu_time_ms(fn)
    tb, n = gpu_time_ms_batched(fn)
    return {"gpu_ms": t, "gpu_ms_batched": tb, "batch": n, "tflops": flops / t / 1e9,
            "tflops_batched": flops / tb / 1e9, "gbps_batched": nbytes / tb / 1e6}


def record(case, impl, **kw):
    row = {"case": case, "impl": impl, **kw}
    results.append(row)
    print(json.dumps(row), flush=True)


def weight(fan_in, *shape):
    return torch.randn(*shape, device=DEV, dtype=torch.bfloat16) / math.sqrt(fan_in)


def rmsnorm(x, g, eps=1e-5):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight=g, eps=eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g.float()).to(x.dtype)


def mlp_block(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2) + x


def attention_block(x, g, wq, wk, wv, wo, b, s):
    h = rmsnorm(x, g)
    q = F.linear(h, wq).view(b, s, HEADS, D).transpose(1, 2)
    k = F.linear(h, wk).view(b, s, KV_HEADS, D).transpose(1, 2)
    v = F.linear(h, wv).view(b, s, KV_HEADS, D).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(D), enable_gqa=True)
    return F.linear(o.transpose(1, 2).reshape(1, b * s, HEADS * D), wo) + x


def measure(case, fn, args, flops, nbytes):
    """torch eager, then torch.compile of the same function (its first call, the compile, timed)."""
    call = lambda: fn(*args)
    try:
        ref = call()
        record(case, "torch-eager", **timed(call, flops, nbytes))
    except Exception as e:
        record(case, "torch-eager", error=repr(e)[:300])
        return
    try:
        compiled = torch.compile(fn)
        t0 = time.perf_counter()
        out = compiled(*args)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
        record(case, "torch-compile", compile_s=compile_s, rel_err_vs_eager=err,
               **timed(lambda: compiled(*args), flops, nbytes))
    except Exception as e:
        record(case, "torch-compile", error=repr(e)[:300])


def case_mlp(t, phase):
    case = f"partition_mlp_{phase}_t{t}_e{E}_f{FF}"
    x = torch.randn(1, t, E, device=DEV, dtype=torch.bfloat16)
    # nn.Linear's layout: [out, in].
    w1, w2 = weight(E, FF, E), weight(FF, E, FF)
    b1 = 0.5 * torch.randn(FF, device=DEV, dtype=torch.bfloat16)
    b2 = 0.5 * torch.randn(E, device=DEV, dtype=torch.bfloat16)
    flops = 4.0 * t * E * FF
    nbytes = 2.0 * (2 * t * E + 2 * E * FF + FF + E)
    measure(case, mlp_block, (x, w1, b1, w2, b2), flops, nbytes)


def case_attention(b, s, phase):
    case = f"partition_attention_{phase}_b{b}_s{s}_h{HEADS}x{D}_kv{KV_HEADS}"
    t, ekv = b * s, KV_HEADS * D
    x = torch.randn(1, t, E, device=DEV, dtype=torch.bfloat16)
    g = 1.0 + 0.1 * torch.randn(E, device=DEV, dtype=torch.bfloat16)
    wq, wo = weight(E, E, E), weight(E, E, E)
    wk, wv = weight(E, ekv, E), weight(E, ekv, E)
    flops = 2.0 * t * E * (2 * E + 2 * ekv) + 4.0 * b * HEADS * s * s * D * 0.5
    nbytes = 2.0 * (2 * t * E + E + 2 * E * E + 2 * E * ekv)
    fn = lambda *a: attention_block(*a, b, s)
    measure(case, fn, (x, g, wq, wk, wv, wo), flops, nbytes)


def our_rows(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def decode_s_of(rows):
    for r in rows:
        m = re.match(r"partition_attention_decode_b1_s(\d+)_", r.get("case", ""))
        if m:
            return int(m.group(1))
    return None


def table(ours):
    """Ours (partitioned, hand split) beside PyTorch, batched device times, ms."""
    cases = sorted({r["case"] for r in results})
    def ms(rows, case, impl, key):
        for r in rows:
            if r.get("case") == case and r.get("impl") == impl and key in r:
                return r[key]
        return None
    fmt = lambda v: "—" if v is None else f"{v:.4f}"
    print("\n| case | partitioned | hand split | partitioned / split | torch eager | torch.compile |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c in cases:
        p = ms(ours, c, "cudnn-graph-partitioned", "gpu_ms")
        h = ms(ours, c, "cudnn-graph-hand-split", "gpu_ms")
        ratio = ms(ours, c, "cudnn-graph-partitioned", "ratio_vs_hand_split")
        print(f"| {c} | {fmt(p)} | {fmt(h)} | {fmt(ratio)} | {fmt(ms(results, c, 'torch-eager', 'gpu_ms_batched'))} "
              f"| {fmt(ms(results, c, 'torch-compile', 'gpu_ms_batched'))} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every row to this file (a JSON list)")
    ap.add_argument("--ours", help="examples/bench.rs's JSON lines: the decode S, and a comparison table")
    ap.add_argument("--decode-s", type=int, help="S of the B = 1 decode attention (default: --ours's, else 1)")
    args = ap.parse_args()
    ours = our_rows(args.ours) if args.ours else []
    decode_s = args.decode_s or decode_s_of(ours) or 1
    print(f"# torch {torch.__version__}, cuDNN (torch) {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}; decode attention at S = {decode_s}", flush=True)
    torch.manual_seed(0)
    case_mlp(4096, "prefill")
    case_mlp(1, "decode")
    case_attention(1, 4096, "prefill")
    case_attention(1, decode_s, "decode")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if ours:
        table(ours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
