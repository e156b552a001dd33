"""PyTorch eager anchor for cudnn-graph-candle's `llama_bench`: the same Llama-style decoder layer
(RMSNorm, Q/K/V projections, rotary embedding, causal grouped-query attention over a KV cache,
SwiGLU MLP, residuals) at Llama 3 8B's sizes in bf16, timed the same way (5 warm-up calls, then
the mean of --iters calls between two synchronizations), one JSON line per phase:

    python3 docs/bench/llama_layer_torch.py [--iters 50]

Attention is `F.scaled_dot_product_attention` with `enable_gqa`; a decode step (one query after
the cache) sees every key, a prefill from position 0 is causal.
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=50)
    iters = parser.parse_args().iters
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(1)

    def w(out, inp):
        return (torch.randn(out, inp, device=dev, generator=g) / inp**0.5).to(dt)

    wq, wk, wv, wo = w(H * D, E), w(HKV * D, E), w(HKV * D, E), w(E, H * D)
    wg, wu, wd = w(FF, E), w(FF, E), w(E, FF)
    n1 = (1 + 0.1 * torch.randn(E, device=dev, generator=g)).to(dt)
    n2 = (1 + 0.1 * torch.randn(E, device=dev, generator=g)).to(dt)
    inv_freq = 1.0 / THETA ** (torch.arange(0, D, 2, device=dev).float() / D)

    for phase, b, s, past in CASES:
        x = torch.randn(b, s, E, device=dev, generator=g).to(dt)
        pos = torch.arange(past, past + s, device=dev).float()
        freqs = torch.outer(pos, inv_freq)
        cos, sin = freqs.cos().to(dt), freqs.sin().to(dt)
        kc = torch.randn(b, HKV, past, D, device=dev, generator=g).to(dt)
        vc = torch.randn(b, HKV, past, D, device=dev, generator=g).to(dt)

        def forward():
            h = F.rms_norm(x, (E,), n1, EPS)
            q = F.linear(h, wq).view(b, s, H, D).transpose(1, 2)
            k = F.linear(h, wk).view(b, s, HKV, D).transpose(1, 2)
            v = F.linear(h, wv).view(b, s, HKV, D).transpose(1, 2)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            if past:
                k, v = torch.cat([kc, k], 2), torch.cat([vc, v], 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=past == 0 and s > 1, enable_gqa=True)
            x1 = F.linear(o.transpose(1, 2).reshape(b, s, E), wo) + x
            m = F.rms_norm(x1, (E,), n2, EPS)
            return F.linear(F.silu(F.linear(m, wg)) * F.linear(m, wu), wd) + x1

        with torch.inference_mode():
            for _ in range(5):
                forward()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                forward()
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3 / iters
        print(json.dumps({"bench": "llama_layer_forward", "impl": "torch-eager", "phase": phase, "batch": b,
                          "tokens": s, "past": past, "hidden": E, "heads": H, "kv_heads": HKV,
                          "intermediate": FF, "iters": iters, "ms": round(ms, 4),
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
