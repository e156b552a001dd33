#!/bin/sh
# Regenerates append.ptx from append.cu (the kernel of append.rs). Run it from anywhere:
#
#   sh cudnn-runtime/src/serving/append-ptx.sh
#
# It needs nvcc (CUDA 11.0 or later; PyPI's `nvidia-cuda-nvcc` has one, with gcc as the host
# compiler: put its bin/ on PATH, or set NVCC). It runs
#
#   nvcc -ptx -arch=compute_80 -o - append.cu | sed 's/^\.version .*$/.version 7.0/'
#
# The sed pins the PTX ISA version to 7.0 (CUDA 11.0): nvcc writes its own (9.5 for CUDA 13.5),
# which a driver older than that nvcc refuses (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), and the two
# kernels need nothing newer. Where ptxas is beside nvcc, it checks that claim: it refuses an
# instruction that ISA 7.0 lacks.
set -eu
cd "$(dirname "$0")"
NVCC="${NVCC:-nvcc}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
{
    echo "// GENERATED from append.cu by append-ptx.sh (beside this file): do not edit; edit append.cu and run"
    echo "//   sh cudnn-runtime/src/serving/append-ptx.sh"
    echo "// which runs: nvcc -ptx -arch=compute_80 -o - append.cu | sed 's/^\\.version .*\$/.version 7.0/'"
    "$NVCC" -ptx -arch=compute_80 -o - append.cu | sed 's/^\.version .*$/.version 7.0/'
} > "$out"
ptxas="$(dirname "$(command -v "$NVCC")")/ptxas"
if [ -x "$ptxas" ]; then
    "$ptxas" -arch=sm_80 -o /dev/null "$out"
fi
chmod 644 "$out"
mv "$out" append.ptx
trap - EXIT
