"""PyTorch eager anchor for cudnn-graph-candle's `llama_bench`: the same Llama-style decoder layer
(RMSNorm, Q/K/V projections, rotary embedding, causal grouped-query attention over a KV cache,
SwiGLU MLP, residuals) at Llama 3 8B's sizes in bf16, timed the same way (5 warm-up calls, then
the mean of --iters calls between two synchronizations), one JSON line per phase:

    python3 docs/bench/llama_layer_torch.py [--iters 50] [--rounds 5] [--stages]

Attention is `F.scaled_dot_product_attention` with `enable_gqa`; a decode step (one query after
the cache) sees every key, a prefill from position 0 is causal.

With --stages, the prefill is also timed stage by stage, as `llama_bench --stages` splits
cudnn-graph's and candle's forward: rms_norm, qkv (three F.linear), rope (of q and k), attention
(sdpa), o_proj_residual (the attention's output back to [B, S, E], F.linear and the residual),
rms_norm2, swiglu (silu(F.linear g) * F.linear u) and down_residual (F.linear and the residual),
each on inputs computed once by a real forward pass, timed as the forward is. One JSON line per
stage ("bench": "llama_layer_stage", "impl": "torch"), "tflops" on the GEMM and attention stages
(2·M·N·K per GEMM, the causal attention's 2·2·B·H·S·S·D/2), then a "stage": "sum" line with the
stages' total next to the whole forward's time.
"""

import argparse
import json
import time

import torch
import torch.nn.functional as F

E, H, HKV, FF, EPS, THETA = 4096, 32, 8, 14336, 1e-5, 500000.0
D = E // H
CASES = [("decode", 1, 1, 4095), ("prefill", 1, 4096, 0)]


def rope(x, cos, sin):
    # x [B, H, S, D], cos/sin [S, D/2]: candle's `rope` (halves rotated, not interleaved).
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    cos, sin = cos[None, None], sin[None, None]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def layer_weights(dev, dt, g):
    """The layer's random weights (scaled like an initialised layer) and the rotary inverse
    frequencies: wq, wk, wv, wo, w_gate, w_up, w_down, the two norms' scales, inv_freq."""

    def w(out, inp):
        return (torch.randn(out, inp, device=dev, generator=g) / inp**0.5).to(dt)

    wq, wk, wv, wo = w(H * D, E), w(HKV * D, E), w(HKV * D, E), w(E, H * D)
    wg, wu, wd = w(FF, E), w(FF, E), w(E, FF)
    n1 = (1 + 0.1 * torch.randn(E, device=dev, generator=g)).to(dt)
    n2 = (1 + 0.1 * torch.randn(E, device=dev, generator=g)).to(dt)
    inv_freq = 1.0 / THETA ** (torch.arange(0, D, 2, device=dev).float() / D)
    return wq, wk, wv, wo, wg, wu, wd, n1, n2, inv_freq


def timed(fn, iters):
    """The mean time of fn() in ms: 5 warm-up calls, then iters calls between two synchronizations."""
    with torch.inference_mode():
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1,
                        help="time the forward this many times and report the median (and the spread)")
    parser.add_argument("--stages", action="store_true", help="also time the prefill stage by stage")
    args = parser.parse_args()
    iters = args.iters
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(1)
    wq, wk, wv, wo, wg, wu, wd, n1, n2, inv_freq = layer_weights(dev, dt, g)

    for phase, b, s, past in CASES:
        x = torch.randn(b, s, E, device=dev, generator=g).to(dt)
        pos = torch.arange(past, past + s, device=dev).float()
        freqs = torch.outer(pos, inv_freq)
        cos, sin = freqs.cos().to(dt), freqs.sin().to(dt)
        kc = torch.randn(b, HKV, past, D, device=dev, generator=g).to(dt)
        vc = torch.randn(b, HKV, past, D, device=dev, generator=g).to(dt)

        # The forward's stages, chained by forward() and timed one by one with --stages.
        def norm1(x):
            return F.rms_norm(x, (E,), n1, EPS)

        def qkv(h):
            q = F.linear(h, wq).view(b, s, H, D).transpose(1, 2)
            k = F.linear(h, wk).view(b, s, HKV, D).transpose(1, 2)
            v = F.linear(h, wv).view(b, s, HKV, D).transpose(1, 2)
            return q, k, v

        def rope_qk(q, k):
            return rope(q, cos, sin), rope(k, cos, sin)

        def attention(q, k, v):
            if past:
                k, v = torch.cat([kc, k], 2), torch.cat([vc, v], 2)
            return F.scaled_dot_product_attention(q, k, v, is_causal=past == 0 and s > 1, enable_gqa=True)

        def o_proj(o, x):
            return F.linear(o.transpose(1, 2).reshape(b, s, E), wo) + x

        def norm2(x1):
            return F.rms_norm(x1, (E,), n2, EPS)

        def swiglu(m):
            return F.silu(F.linear(m, wg)) * F.linear(m, wu)

        def down(mlp, x1):
            return F.linear(mlp, wd) + x1

        def forward():
            q, k, v = qkv(norm1(x))
            q, k = rope_qk(q, k)
            x1 = o_proj(attention(q, k, v), x)
            return down(swiglu(norm2(x1)), x1)

        rounds = sorted(timed(forward, iters) for _ in range(max(args.rounds, 1)))
        ms = rounds[len(rounds) // 2]
        print(json.dumps({"bench": "llama_layer_forward", "impl": "torch-eager", "phase": phase, "batch": b,
                          "tokens": s, "past": past, "hidden": E, "heads": H, "kv_heads": HKV,
                          "intermediate": FF, "iters": iters, "ms": round(ms, 4),
                          "rounds": len(rounds), "min_ms": round(rounds[0], 4), "max_ms": round(rounds[-1], 4),
                          "torch": torch.__version__}))

        if args.stages and phase == "prefill":
            with torch.inference_mode():
                h = norm1(x)
                q, k, v = qkv(h)
                qr, kr = rope_qk(q, k)
                o = attention(qr, kr, v)
                x1 = o_proj(o, x)
                m = norm2(x1)
                mlp = swiglu(m)
            t = b * s
            stages = [
                ("rms_norm", None, lambda: norm1(x)),
                ("qkv", 2 * t * E * (H * D + 2 * HKV * D), lambda: qkv(h)),
                ("rope", None, lambda: rope_qk(q, k)),
                # Q·Kᵀ and P·V, the causal half of each.
                ("attention", 2 * 2 * b * H * s * s * D / 2, lambda: attention(qr, kr, v)),
                ("o_proj_residual", 2 * t * (H * D) * E, lambda: o_proj(o, x)),
                ("rms_norm2", None, lambda: norm2(x1)),
                ("swiglu", 2 * 2 * t * E * FF, lambda: swiglu(m)),
                ("down_residual", 2 * t * FF * E, lambda: down(mlp, x1)),
            ]
            total = 0.0
            for name, flops, fn in stages:
                stage_ms = timed(fn, iters)
                total += stage_ms
                line = {"bench": "llama_layer_stage", "impl": "torch", "phase": phase, "stage": name,
                        "iters": iters, "ms": round(stage_ms, 4)}
                if flops is not None:
                    line["tflops"] = round(flops / (stage_ms * 1e-3) / 1e12, 1)
                print(json.dumps(line))
            print(json.dumps({"bench": "llama_layer_stage", "impl": "torch", "phase": phase, "stage": "sum",
                              "iters": iters, "ms": round(total, 4), "forward_ms": round(ms, 4)}))


if __name__ == "__main__":
    main()
