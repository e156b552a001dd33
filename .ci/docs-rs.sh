#!/usr/bin/env bash
# CI (issue 35): each publishable crate's documentation builds as docs.rs builds it: that crate
# alone (so its features are its own, not the workspace's union), with the features of its
# `[package.metadata.docs.rs]`, `--cfg docsrs` and DOCS_RS=1, and with no CUDA or cuDNN anywhere
# (LD_LIBRARY_PATH and the CUDA variables cudarc's build script reads are unset). Warnings fail.
# docs.rs's nightly rustdoc is not used: the pinned toolchain is what the crates promise to build.
set -euo pipefail
cd "$(dirname "$0")/.."

# One line per publishable crate: NAME, then the cargo flags its docs.rs metadata asks for.
plan=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") == []:
        continue
    meta = ((p.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    known = {"features", "all-features", "no-default-features", "targets", "rustdoc-args"}
    unknown = set(meta) - known
    if unknown:
        sys.exit("docs-rs: %s: docs.rs metadata this check does not reproduce: %s" % (p["name"], sorted(unknown)))
    flags = []
    if meta.get("all-features"):
        flags.append("--all-features")
    if meta.get("no-default-features"):
        flags.append("--no-default-features")
    if meta.get("features"):
        flags += ["--features", ",".join(meta["features"])]
    extra = " ".join(meta.get("rustdoc-args", []))
    print("%s\t%s\t%s" % (p["name"], " ".join(flags), extra))')

while IFS=$'\t' read -r name flags extra; do
  echo "docs-rs: $name ${flags:-(default features)}" >&2
  # shellcheck disable=SC2086 # flags are words
  env -u LD_LIBRARY_PATH -u CUDA_HOME -u CUDA_PATH -u CUDA_ROOT -u CUDA_TOOLKIT_ROOT_DIR -u CUDNN_LIB \
    DOCS_RS=1 RUSTDOCFLAGS="--cfg docsrs -D warnings $extra" \
    cargo doc --quiet --no-deps --package "$name" $flags
done <<<"$plan"
