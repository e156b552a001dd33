"""PyTorch eager anchor for cudnn-graph-candle's `llama_serve`: the same Llama-style decoder layer
(RMSNorm, Q/K/V projections, rotary embedding, grouped-query attention over a KV cache, SwiGLU MLP,
residuals) at Llama 3 8B's sizes in bf16, decoding the batches of a serving trace that
`llama_serve --trace-out PATH` wrote, step by step, timed as `llama_serve` times a step (from
the step's first launch to the device synchronized after it):

    python3 docs/bench/llama_serve_torch.py --trace PATH [--max-batch 64] [--capacity 1536]
        [--sdpa-backend default|efficient|math|cudnn]

The trace is one JSON line per step: the prompt lengths of the requests arriving before it (`a`)
and the indices of the requests finished after it (`f`); the batch is the live requests in
arrival order, each finished one replaced by the last (Rust's `swap_remove`), which this script
mirrors by keeping request i's cache in row i of one preallocated cache `[max_batch, HKV,
capacity, D]` and copying the last row into a finished one's. A step is what PyTorch eager does
for continuous batching without a paged kernel: the live rows' K/V written at each one's length,
then `F.scaled_dot_product_attention` (`enable_gqa`) over the rows' first `max length` positions
with a boolean mask of each row's length (`--sdpa-backend` forces one of PyTorch's attention
kernels; by default PyTorch picks, and on the H100 with torch 2.11 its steps are bimodal: most
near the median, some 60 times longer, as a step whose longest sequence is new to it). Prompts' K/V are random (prefill is not timed, as in
`llama_serve`). One JSON line: tokens, tokens per second over the decode steps, step p50/p99.
"""

import argparse
import json
import time

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The layer's sizes and weights, as the forward anchor makes them (this script's folder is on
# sys.path when it runs).
from llama_layer_torch import D, E, EPS, FF, H, HKV, layer_weights


def rope(x, cos, sin):
    # x [B, H, 1, D], cos/sin [B, D/2]: candle's `rope` (halves rotated, not interleaved), one
    # position per row.
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    cos, sin = cos[:, None, None, :], sin[:, None, None, :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", required=True)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--capacity", type=int, default=1536, help="tokens a cache row holds")
    parser.add_argument("--sdpa-backend", default="default", choices=["default", "efficient", "math", "cudnn"],
                        help="the attention backend: PyTorch's choice, or one forced with torch.nn.attention.sdpa_kernel")
    parser.add_argument("--json")
    args = parser.parse_args()
    steps = [json.loads(line) for line in open(args.trace)]
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(1)

    wq, wk, wv, wo, wg, wu, wd, n1, n2, inv_freq = layer_weights(dev, dt, g)
    freqs = torch.outer(torch.arange(args.capacity, device=dev).float(), inv_freq)
    cos_all, sin_all = freqs.cos().to(dt), freqs.sin().to(dt)
    kc = torch.zeros(args.max_batch, HKV, args.capacity, D, device=dev, dtype=dt)
    vc = torch.zeros_like(kc)
    positions = torch.arange(args.capacity, device=dev)

    def step(x, lens):
        b = x.shape[0]
        h = F.rms_norm(x, (E,), n1, EPS)
        q = F.linear(h, wq).view(b, 1, H, D).transpose(1, 2)
        k = F.linear(h, wk).view(b, 1, HKV, D).transpose(1, 2)
        v = F.linear(h, wv).view(b, 1, HKV, D).transpose(1, 2)
        cos, sin = cos_all[lens], sin_all[lens]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rows = torch.arange(b, device=dev)
        kc[rows, :, lens] = k[:, :, 0]
        vc[rows, :, lens] = v[:, :, 0]
        longest = int(lens_host.max()) + 1
        mask = (positions[:longest][None, :] <= lens[:, None])[:, None, None, :]
        o = F.scaled_dot_product_attention(q, kc[:b, :, :longest], vc[:b, :, :longest], attn_mask=mask,
                                           enable_gqa=True)
        x1 = F.linear(o.transpose(1, 2).reshape(b, 1, E), wo) + x
        m = F.rms_norm(x1, (E,), n2, EPS)
        return F.linear(F.silu(F.linear(m, wg)) * F.linear(m, wu), wd) + x1

    backends = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH,
                "cudnn": SDPBackend.CUDNN_ATTENTION}
    forced = sdpa_kernel([backends[args.sdpa_backend]]) if args.sdpa_backend in backends else nullcontext()
    live = []  # each live request's length, in row order
    times, tokens = [], 0
    with torch.inference_mode(), forced:
        for event in steps:
            for prompt in event["a"]:
                row = len(live)
                kc[row, :, :prompt] = torch.randn(HKV, prompt, D, device=dev, generator=g).to(dt)
                vc[row, :, :prompt] = torch.randn(HKV, prompt, D, device=dev, generator=g).to(dt)
                live.append(prompt)
            if not live:
                continue
            b = len(live)
            lens_host = torch.tensor(live)
            lens = lens_host.to(dev)
            x = torch.randn(b, 1, E, device=dev, generator=g).to(dt)
            torch.cuda.synchronize()
            start = time.perf_counter()
            step(x, lens)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e6)
            tokens += b
            live = [n + 1 for n in live]
            for i in event["f"]:
                last = len(live) - 1
                if i != last:
                    kc[i].copy_(kc[last])
                    vc[i].copy_(vc[last])
                live[i] = live[last]
                live.pop()
    first_100_us = sum(times[:100])
    times.sort()
    row = {"bench": "llama_serve", "engine": "torch-eager", "sdpa_backend": args.sdpa_backend,
           "steps_run": len(times), "tokens": tokens,
           "tokens_per_s": tokens / (sum(times) / 1e6), "step_us_p50": times[len(times) // 2],
           "step_us_p90": times[min(len(times) - 1, round((len(times) - 1) * 0.9))],
           "step_us_p99": times[min(len(times) - 1, round((len(times) - 1) * 0.99))],
           "step_us_mean": sum(times) / max(len(times), 1), "first_100_steps_us": first_100_us,
           "mean_batch": tokens / max(len(times), 1), "torch": torch.__version__}
    print(json.dumps(row))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
