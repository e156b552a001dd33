#!/usr/bin/env python3
"""Executes our plans with cudnn-frontend 1.32 on the GPU and compares its outputs with ours.

    CUDNN_GRAPH_EXCHANGE_DIR=DIR <tests/gpu_frontend_payload binary> gpu_our_payloads_for_cudnn_frontend
    python3 tests/frontend/exchange.py DIR

The Rust test writes one folder a case into DIR: `payload.ubjson` (the plan we built, written as
cudnn-frontend's payload by `serialize::frontend_payload`), each input's and each of our outputs'
bytes (`<uid>.bin`) and `manifest.json` (a host scalar, role `host_scalar`, is given to
cudnn-frontend as a CPU tensor, by value). Here cudnn-frontend deserializes the payload on the GPU,
executes it on the same inputs (outputs poisoned with NaN first) and each output is compared with
ours bit for bit: same plan, same engine, same inputs. Needs torch (CUDA) and cudnn-frontend on
PYTHONPATH. Exits 1 if any output differs or any case fails.
"""

import json
import os
import sys

import torch

import cudnn

DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
# Same-width integer views, to compare bit patterns (NaNs included).
BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def run_case(handle, case_dir):
    with open(os.path.join(case_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(os.path.join(case_dir, "payload.ubjson"), "rb") as f:
        payload = f.read()
    graph = cudnn.pygraph()
    graph.deserialize(handle, payload)
    pack, ours = {}, {}
    for t in manifest["tensors"]:
        dtype = DTYPES[t["dtype"]]
        with open(os.path.join(case_dir, t["file"]), "rb") as f:
            host = torch.frombuffer(bytearray(f.read()), dtype=dtype)
        if t["role"] == "input":
            pack[t["uid"]] = host.cuda()
        elif t["role"] == "host_scalar":
            # A by-value scalar supplied at execute: cudnn-frontend passes a CPU tensor's
            # address, which cuDNN reads from host memory.
            pack[t["uid"]] = host
        else:
            ours[t["uid"]] = (t["name"], host)
            pack[t["uid"]] = torch.full_like(host, float("nan")).cuda()
    workspace = torch.empty(max(graph.get_workspace_size(), 1), dtype=torch.uint8, device="cuda")
    graph.execute(pack, workspace, handle=handle)
    torch.cuda.synchronize()
    differs = 0
    for uid, (name, mine) in ours.items():
        theirs = pack[uid].cpu()
        same = torch.equal(theirs.view(BITS[mine.dtype]), mine.view(BITS[mine.dtype]))
        diff = (theirs.double() - mine.double()).abs().max().item()
        verdict = "bit-identical" if same else "DIFFERS"
        print(f"{manifest['graph']}: output {name} (uid {uid}) executed by cudnn-frontend: {verdict} "
              f"to cudnn-graph's (max abs diff {diff:.3e}, {mine.numel()} values)")
        differs += not same
    return differs


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    handle = cudnn.create_handle()
    failures = 0
    cases = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not cases:
        print(f"no cases in {root}", file=sys.stderr)
        return 1
    for case in cases:
        try:
            failures += run_case(handle, os.path.join(root, case))
        except Exception as e:  # a case that cannot run is a failure, reported, not a crash
            print(f"{case}: FAILED: {type(e).__name__}: {e}")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
