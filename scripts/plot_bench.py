#!/usr/bin/env python3
"""Turn benchmark JSON into SVG charts and a Markdown table, with the Python standard library only.

    python3 scripts/plot_bench.py BENCH.jsonl [--anchor ANCHOR.json] [--out docs/img] [--table]

BENCH.jsonl is what `cargo run --release --example bench -- --json BENCH.jsonl` writes (one JSON
object per line); ANCHOR.json is what `shared/bench/anchor_cudnn_frontend.py --json` writes (a JSON
list, or its stdout: one object per line). Both use the same schema: `case`, `impl`, then figures.

Writes into --out (default docs/img):
  bench_device.svg     TFLOP/s of matmul+bias+relu bf16 per size, and layernorm GB/s
  bench_host.svg       host µs per execute on the tiny graphs (raw cuDNN, ours, anchors)
  bench_build.svg      build time per phase (cold, warm) and warm starts (cache, payload), log scale
With --table, prints a Markdown table of every figure with ratios to the anchors on stdout.
"""

import argparse
import json
import math
import os
import sys
from xml.sax.saxutils import escape

COLORS = {
    "torch-eager": "#8c8c8c",
    "torch-sdpa": "#8c8c8c",
    "cudnn-frontend": "#e07b39",
    "cudnn-graph": "#3b6fb6",
    "cudnn-graph-autotuned": "#1b3f73",
    "raw-cudnn-prebuilt-pack": "#5aa469",
    "raw-cudnn-pack-per-call": "#9bd0a4",
}
DEFAULT_COLOR = "#6d93cf"


def load(path):
    """Rows from a JSON list, or from JSON lines (other lines, like comments, are skipped)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        doc = json.loads(text)
        if isinstance(doc, list):
            return [r for r in doc if isinstance(r, dict)]
    except ValueError:
        pass
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def pick(rows, case, impl, key):
    for r in rows:
        if r.get("case") == case and r.get("impl") == impl and isinstance(r.get(key), (int, float)):
            return float(r[key])
    return None


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def hbar_svg(title, groups, unit, log=False, width=760):
    """Horizontal bars: groups is [(group label, [(bar label, value, color key)])]."""
    bar_h, gap, label_w, value_w, top = 18, 6, 230, 70, 40
    values = [v for _, bars in groups for _, v, _ in bars if v is not None and v > 0]
    if not values:
        return None
    vmax = max(values)
    vmin = min(values)
    lo = 10 ** math.floor(math.log10(vmin)) if log else 0.0
    hi = 10 ** math.ceil(math.log10(vmax)) if log else vmax * 1.05
    plot_w = width - label_w - value_w - 20

    def scale(v):
        if log:
            return plot_w * (math.log10(v) - math.log10(lo)) / max(math.log10(hi) - math.log10(lo), 1e-9)
        return plot_w * v / hi

    rows = sum(len(b) + 1 for _, b in groups)
    height = top + rows * (bar_h + gap) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    # Grid lines.
    ticks = []
    if log:
        e = math.log10(lo)
        while e <= math.log10(hi) + 1e-9:
            ticks.append(10 ** e)
            e += 1
    else:
        step = 10 ** math.floor(math.log10(hi)) if hi > 0 else 1
        if hi / step < 3:
            step /= 2
        t = 0.0
        while t <= hi:
            ticks.append(t)
            t += step
    for t in ticks:
        x = label_w + (scale(t) if t > 0 else 0)
        out.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 24}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle" fill="#666">{fmt(t)}</text>')
    out.append(f'<text x="{width - 10}" y="{height - 10}" text-anchor="end" fill="#666">{escape(unit)}</text>')
    y = top
    for group, bars in groups:
        out.append(f'<text x="8" y="{y + bar_h - 4}" font-weight="bold">{escape(group)}</text>')
        y += bar_h + gap
        for label, v, key in bars:
            out.append(f'<text x="{label_w - 8}" y="{y + bar_h - 5}" text-anchor="end">{escape(label)}</text>')
            if v is not None and v > 0:
                w = max(scale(v), 1.0)
                color = COLORS.get(key, DEFAULT_COLOR)
                out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}"/>')
                out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 5}">{fmt(v)}</text>')
            else:
                out.append(f'<text x="{label_w + 4}" y="{y + bar_h - 5}" fill="#999">not measured</text>')
            y += bar_h + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def device_chart(ours, anchor):
    cases = sorted({r["case"] for r in ours + anchor if str(r.get("case", "")).startswith("matmul_bias_relu_bf16_")},
                   key=lambda c: int(c.rsplit("_", 1)[1]))
    groups = []
    for c in cases:
        size = c.rsplit("_", 1)[1]
        groups.append((f"matmul+bias+relu bf16 {size}³", [
            ("torch eager", pick(anchor, c, "torch-eager", "tflops"), "torch-eager"),
            ("cudnn-frontend", pick(anchor, c, "cudnn-frontend", "tflops"), "cudnn-frontend"),
            ("cudnn-graph (heuristics)", pick(ours, c, "cudnn-graph", "tflops"), "cudnn-graph"),
            ("cudnn-graph (autotuned)", pick(ours, c, "cudnn-graph-autotuned", "tflops"), "cudnn-graph-autotuned"),
        ]))
    tflops = hbar_svg("Device throughput, H200 (higher is better)", groups, "TFLOP/s")
    ln = "layernorm_16384x4096"
    gb = hbar_svg("Layer norm bf16 16384×4096 (higher is better)", [("layernorm inference", [
        ("torch eager", pick(anchor, ln, "torch-eager", "gbps"), "torch-eager"),
        ("cudnn-frontend", pick(anchor, ln, "cudnn-frontend", "gbps"), "cudnn-frontend"),
        ("cudnn-graph (heuristics)", pick(ours, ln, "cudnn-graph", "gbps"), "cudnn-graph"),
        ("cudnn-graph (autotuned)", pick(ours, ln, "cudnn-graph-autotuned", "gbps"), "cudnn-graph-autotuned"),
    ])], "GB/s")
    return tflops, gb


HOST_IMPLS = [
    ("raw cudnnBackendExecute, prebuilt pack", "raw-cudnn-prebuilt-pack"),
    ("raw, variant pack per call", "raw-cudnn-pack-per-call"),
    ("cudnn-graph execute_raw", "cudnn-graph-execute-raw"),
    ("cudnn-graph execute (checked)", "cudnn-graph-execute"),
    ("cudnn-graph typed (graph!)", "cudnn-graph-typed"),
    ("cudnn-graph CUDA graph (native)", "cudnn-graph-cuda-graph-native"),
    ("cudnn-graph CUDA graph (captured)", "cudnn-graph-cuda-graph-captured"),
]


def host_chart(ours, anchor):
    groups = []
    for case, title in [("host_overhead_64", "matmul+bias+relu 64³"), ("host_overhead_add_relu_64", "add+relu 64×64")]:
        bars = [(label, pick(ours, case, impl, "host_us"), impl) for label, impl in HOST_IMPLS
                if pick(ours, case, impl, "host_us") is not None]
        if case == "host_overhead_64":
            bars.append(("cudnn-frontend (Python)", pick(anchor, case, "cudnn-frontend", "host_us"), "cudnn-frontend"))
            bars.append(("torch eager", pick(anchor, case, "torch-eager", "host_us"), "torch-eager"))
        groups.append((title, bars))
    return hbar_svg("Host time per execute, H200 (lower is better)", groups, "µs per call")


def build_chart(ours, anchor):
    groups = []
    for case in sorted({r["case"] for r in ours if str(r.get("case", "")).startswith("build_")}):
        bars = []
        for impl, label in [("cudnn-graph-cold", "cold"), ("cudnn-graph-warm", "warm (median)")]:
            for key, phase in [("heuristics_ms", "heuristics"), ("plan_build_ms", "plan build"),
                               ("lower_ms", "lower"), ("check_support_ms", "check support"), ("validate_ms", "validate")]:
                bars.append((f"{label}: {phase}", pick(ours, case, impl, key), "cudnn-graph"))
            bars.append((f"{label}: total", pick(ours, case, impl, "build_ms"), "cudnn-graph-autotuned"))
        bars.append(("cache hit (memory)", pick(ours, case, "cudnn-graph-cache-memory", "load_ms_median"), "raw-cudnn-prebuilt-pack"))
        bars.append(("cache hit (disk)", pick(ours, case, "cudnn-graph-cache-disk", "load_ms_median"), "raw-cudnn-prebuilt-pack"))
        bars.append(("payload read", pick(ours, case, "cudnn-graph-payload", "deserialize_ms_median_of_5"), "raw-cudnn-prebuilt-pack"))
        if case == "build_matmul_bias_relu_bf16_4096":
            a = "serialize_matmul_bias_relu_4096"
            bars.append(("cudnn-frontend build", pick(anchor, a, "cudnn-frontend", "build_ms"), "cudnn-frontend"))
            bars.append(("cudnn-frontend deserialize", pick(anchor, a, "cudnn-frontend", "deserialize_ms_median_of_5"), "cudnn-frontend"))
        groups.append((case.replace("build_", ""), bars))
    return hbar_svg("Build and warm-start time, H200 (lower is better, log scale)", groups, "ms", log=True)


def table(ours, anchor):
    lines = ["| case | impl | figure | value | vs cudnn-frontend | vs torch |", "| --- | --- | --- | --- | --- | --- |"]
    keys = ["tflops", "gbps", "gpu_ms", "host_us", "ratio_vs_raw_prebuilt", "build_ms", "load_ms_median",
            "deserialize_ms_median_of_5", "serialize_ms_median"]
    better_high = {"tflops", "gbps"}
    for r in ours:
        for k in keys:
            v = r.get(k)
            if not isinstance(v, (int, float)):
                continue
            case = r["case"]
            fe = pick(anchor, case, "cudnn-frontend", k)
            to = pick(anchor, case, "torch-eager", k)

            def ratio(a):
                if a is None or a == 0 or v == 0:
                    return "—"
                return f"{(v / a) if k in better_high else (a / v):.2f}×"
            lines.append(f"| {case} | {r['impl']} | {k} | {fmt(float(v))} | {ratio(fe)} | {ratio(to)} |")
    lines.append("")
    lines.append("Ratios are speedups (> 1 is better for cudnn-graph): throughput ours/theirs, times theirs/ours.")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench")
    ap.add_argument("--anchor")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    ours = load(args.bench)
    anchor = load(args.anchor) if args.anchor else []
    if not ours:
        sys.exit(f"{args.bench}: no benchmark rows")
    os.makedirs(args.out, exist_ok=True)
    tflops, gb = device_chart(ours, anchor)
    for name, svg in [("bench_device.svg", tflops), ("bench_layernorm.svg", gb),
                      ("bench_host.svg", host_chart(ours, anchor)), ("bench_build.svg", build_chart(ours, anchor))]:
        if svg is None:
            print(f"{name}: nothing to plot", file=sys.stderr)
            continue
        path = os.path.join(args.out, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(svg)
        print(path, file=sys.stderr)
    if args.table:
        print(table(ours, anchor))


if __name__ == "__main__":
    main()
