#!/usr/bin/env python3
"""Measures, on a GPU, the cuDNN behaviours cudnn-graph's lowering and CPU reference rely on,
through cudnn-frontend (the same cuDNN, none of our code), one line per finding:

    PYTHONPATH=<cudnn-frontend> python3 tests/frontend/probe_cudnn.py

- A copy between two layouts (a transposed view written packed, as `lower_view_copy` does for
  a view that is a graph output): a pointwise identity from the strided view into the packed
  output, and the same copy with both tensors' axes permuted so the input is row-major and the
  output strided. Each says whether cuDNN wrote the transpose, a linear copy, or something else.
- fp8 conversion of values beyond the format's range (448 for e4m3, 57344 for e5m2),
  infinities and NaN: by a pointwise identity from f32, and at the end of an fp8 matmul's
  epilogue (scaled so some results overflow). The bytes cuDNN wrote are printed, so the
  reference can follow them.

Needs torch (CUDA) and cudnn-frontend. Exits 1 if a probe fails to run.
"""

import sys

import torch

import cudnn

DEV = "cuda"


def finish(g):
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()


def execute(g, pack, handle):
    ws = torch.empty(max(g.get_workspace_size(), 1), device=DEV, dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()


def transpose_copy(handle):
    x = torch.rand(8, 16, 32, dtype=torch.float16, device=DEV) * 2 - 1
    want = x.permute(2, 0, 1).contiguous()  # y = transpose(x, [2, 0, 1]), packed [32, 8, 16]
    cases = [
        # (what, view dims, view strides, output dims, output strides): the same copy twice.
        ("strided input [32,8,16]/[1,512,32] -> packed output", [32, 8, 16], [1, 512, 32], [32, 8, 16], [128, 16, 1]),
        ("row-major input [8,16,32]/[512,32,1] -> strided output [16,1,128]", [8, 16, 32], [512, 32, 1], [8, 16, 32], [16, 1, 128]),
    ]
    for what, vd, vs, yd, ys in cases:
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        X = g.tensor(name="x", dim=vd, stride=vs, data_type=cudnn.data_type.HALF)
        Y = g.identity(name="copy", input=X, compute_data_type=cudnn.data_type.FLOAT)
        Y.set_output(True).set_dim(yd).set_stride(ys).set_data_type(cudnn.data_type.HALF)
        try:
            finish(g)
        except Exception as e:  # noqa: BLE001 - a refusal is a finding
            print(f"transpose copy, {what}: refused: {e}")
            continue
        y = torch.full((32 * 8 * 16,), float("nan"), dtype=torch.float16, device=DEV)
        execute(g, {X: x, Y: y}, handle)
        y = y.view(32, 8, 16)
        err = (y.float() - want.float()).abs().max().item()
        linear = torch.equal(y.flatten(), x.flatten())
        verdict = "the transpose" if err == 0 else ("a linear copy" if linear else "neither")
        print(f"transpose copy, {what}: wrote {verdict} (max abs error {err:.3e}, NaN left {torch.isnan(y).sum().item()})")


def fp8_bytes(t):
    return [f"{b:#04x}" for b in t.view(torch.uint8).flatten().tolist()]


def fp8_identity(handle):
    xs = [447.0, 452.0, 464.0, 476.0, 896.0, 1e30, float("inf"), 57344.0, 61440.0, 1e6, float("nan")]
    xs = xs + [-v for v in xs[:-1]]
    xs = xs + [1.0] * (32 - len(xs))
    x = torch.tensor(xs, dtype=torch.float32, device=DEV).view(1, 1, 32)
    for name, dt, tdt in [("e4m3", cudnn.data_type.FP8_E4M3, torch.float8_e4m3fn),
                          ("e5m2", cudnn.data_type.FP8_E5M2, torch.float8_e5m2)]:
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        X = g.tensor_like(x)
        Y = g.identity(name="to_fp8", input=X, compute_data_type=cudnn.data_type.FLOAT)
        Y.set_output(True).set_data_type(dt)
        finish(g)
        y = torch.zeros(1, 1, 32, dtype=tdt, device=DEV)
        execute(g, {X: x, Y: y}, handle)
        pairs = ", ".join(f"{v:g}->{b}" for v, b in zip(xs, fp8_bytes(y)) if v != 1.0)
        print(f"f32 -> {name} by a pointwise identity: {pairs}")


def fp8_matmul_overflow(handle):
    m = n = k = 128
    a = (torch.rand(1, m, k, device=DEV) + 0.5).to(torch.float8_e4m3fn)
    b = (torch.rand(1, n, k, device=DEV) + 0.5).to(torch.float8_e4m3fn).transpose(1, 2)  # column-major
    for name, dt, tdt, big in [("e4m3", cudnn.data_type.FP8_E4M3, torch.float8_e4m3fn, 448.0),
                               ("e5m2", cudnn.data_type.FP8_E5M2, torch.float8_e5m2, 57344.0)]:
        exact = torch.matmul(a.float(), b.float())
        # A scale that puts the largest results at twice the format's maximum.
        scale = torch.full((1, 1, 1), 2 * big / exact.max().item(), device=DEV)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)
        A = g.tensor_like(a)
        B = g.tensor_like(b)
        S = g.tensor_like(scale)
        C = g.matmul(name="mm", A=A, B=B, compute_data_type=cudnn.data_type.FLOAT)
        C.set_data_type(cudnn.data_type.FLOAT)
        Y = g.mul(name="scale", a=C, b=S, compute_data_type=cudnn.data_type.FLOAT)
        Y.set_output(True).set_data_type(dt)
        finish(g)
        y = torch.zeros(1, m, n, dtype=tdt, device=DEV)
        execute(g, {A: a, B: b, S: scale, Y: y}, handle)
        want = exact * scale
        over = want.abs() > big
        got = y.view(torch.uint8)[over]
        codes = sorted(set(got.tolist()))
        nan = torch.isnan(y.float())[over].sum().item()
        print(f"fp8 matmul -> {name}, {over.sum().item()} results beyond ±{big:g}: codes {[hex(c) for c in codes]}, "
              f"{nan} of them NaN")


def main():
    handle = cudnn.create_handle()
    failed = 0
    for probe in (transpose_copy, fp8_identity, fp8_matmul_overflow):
        try:
            probe(handle)
        except Exception as e:  # noqa: BLE001 - report and go on with the next probe
            print(f"{probe.__name__}: FAILED: {e}")
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
