#!/usr/bin/env bash
# Renders the example graphs into docs/img/*.svg with Graphviz (`apt-get install graphviz`):
# each example writes its graph's structural JSON (--structure), `cudnn-graph picture` turns it
# into DOT, and `dot` draws it. Re-run after changing an example's graph and commit the SVGs.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v dot >/dev/null || { echo "render-graphs: needs Graphviz's dot (apt-get install graphviz)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build -q --examples --bin cudnn-graph
for example in matmul_bias_relu conv_bias_relu layernorm attention "$@"; do
  cargo run -q --example "$example" -- --structure "$tmp/$example.json" >/dev/null
  cargo run -q --bin cudnn-graph -- picture "$tmp/$example.json" | dot -Tsvg -o "docs/img/$example.svg"
  echo "docs/img/$example.svg"
done
