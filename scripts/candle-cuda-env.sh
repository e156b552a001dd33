#!/usr/bin/env bash
# Makes a machine without CUDA able to build candle-core's `cuda` feature (cudnn-graph-candle's
# `cuda`, its tests and examples): installs the CUDA 13.0 toolkit pieces candle needs from PyPI
# into DIR, makes the unversioned lib*.so links the linker looks for, a libcuda.so stand-in that
# exports every driver symbol cudarc declares (the binaries load the real driver where they run),
# and prints the environment to export (on stdout; progress goes to stderr):
#
#   eval "$(bash scripts/candle-cuda-env.sh "$PWD/.whl")"
#   cargo build --release -p cudnn-graph-candle --features cuda --examples --tests
#
# Needs python3 with pip, gcc, and cuDNN from .ci/setup-cudnn.sh (CUDNN_GRAPH_CI_DIR or
# $PWD/.cudnn-ci). The first run takes about a minute of downloads (1.3 GB); the build after it
# compiles candle's kernels with nvcc (about 8 minutes). docs/frameworks.md.
set -euo pipefail

dir=${1:?usage: candle-cuda-env.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
site=$dir/site
cuda=$site/nvidia/cu13

if [[ ! -x $cuda/bin/nvcc ]]; then
  echo "candle-cuda-env: installing the CUDA 13.0 toolkit wheels into $site" >&2
  # The `-cu13` suffixed package names are empty placeholders; nvvm and crt must match nvcc's
  # 13.0.88, and cccl provides nv/target.
  python3 -m pip install --quiet --no-cache-dir --target "$site" \
    "cuda-toolkit[nvcc,cudart,cublas,curand,nvrtc]==13.0.2" nvidia-cuda-cccl \
    "nvidia-nvvm==13.0.88" "nvidia-cuda-crt==13.0.88" >&2
fi

cudnn_dir=${CUDNN_GRAPH_CI_DIR:-$here/.cudnn-ci}
cudnn_path=$(bash "$here/.ci/setup-cudnn.sh" "$cudnn_dir" | tail -n 1)
cudnn_lib=${cudnn_path%%:*}

# The wheels ship versioned names only; the linker looks for lib<name>.so.
for lib in "$cuda"/lib/lib*.so.*; do
  base=$(basename "$lib")
  link=$cuda/lib/${base%%.so.*}.so
  [[ -e $link ]] || ln -s "$base" "$link"
done
ln -sf "$cudnn_lib/libcudnn.so.9" "$cuda/lib/libcudnn.so"

# A libcuda.so stand-in with every driver entry point cudarc's linked bindings name: linking
# only needs the names (and the soname libcuda.so.1, which the real driver provides at run time).
stub=$cuda/lib/libcuda.so
if [[ ! -e $stub.1 ]]; then
  (cd "$here" && cargo fetch --quiet >&2)
  cudarc=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -maxdepth 2 -type d -name 'cudarc-0.19.10' | head -n 1)
  [[ -n $cudarc ]] || { echo "candle-cuda-env: cudarc 0.19.10's source is not in the cargo registry" >&2; exit 1; }
  grep -ohE '^\s+fn cu[A-Za-z0-9_]+\(' "$cudarc/src/driver/sys/mod.rs" | sed -E 's/^\s+fn (cu[A-Za-z0-9_]+)\(/int \1(void) { return 999; }/' | sort -u >"$dir/libcuda_full_stub.c"
  gcc -shared -fPIC -O0 -w -Wl,-soname,libcuda.so.1 -o "$stub.1" "$dir/libcuda_full_stub.c" >&2
  ln -sf libcuda.so.1 "$stub"
  echo "candle-cuda-env: built $stub.1 ($(wc -l <"$dir/libcuda_full_stub.c") entry points)" >&2
fi

echo "export CUDA_ROOT=$cuda"
echo "export PATH=$cuda/bin:\$PATH"
echo "export CUDA_COMPUTE_CAP=90"
echo "export LIBRARY_PATH=$cuda/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
