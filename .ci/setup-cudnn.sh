#!/usr/bin/env bash
# Makes real cuDNN planning possible on a CPU-only machine (CI): installs cuDNN 9.19 from PyPI into
# DIR unless it is there already, compiles the libcuda.so.1 stand-in (.ci/libcuda_stub.c) into
# DIR/libcuda-stub, and prints the LD_LIBRARY_PATH to export (on stdout; progress goes to stderr).
#
#   export LD_LIBRARY_PATH=$(bash .ci/setup-cudnn.sh "$HOME/.cache/cudnn-ci")
#   cargo test -p cudnn-runtime
#
# Another cuDNN (CI's second version, issue 35): setup-cudnn.sh DIR VERSION BASE installs that
# version of nvidia-cudnn-cu13 alone (--no-deps) into DIR and takes its dependencies (cuBLAS,
# NVRTC) and the stand-in from BASE, an install made by the first form.
#
# DIR may be an install made earlier by this script (DIR/site/nvidia/...) or a pip --target
# directory itself (DIR/nvidia/...); either is reused as is when it holds the pinned version.
# LD_LIBRARY_PATH must be exported by the shell that runs cargo: `.cargo/config.toml [env]`
# does not work for it (cargo sets the variable itself).
set -euo pipefail

readonly CUDNN_PACKAGE=nvidia-cudnn-cu13
readonly CUDNN_VERSION=${2:-9.19.0.56}
base=${3:-}

dir=${1:?usage: setup-cudnn.sh DIR [VERSION BASE]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

has_cudnn() {
  [[ -e $1/nvidia/cudnn/lib/libcudnn.so.9 ]] && compgen -G "$1/nvidia_cudnn_cu13-${CUDNN_VERSION}.dist-info" >/dev/null
}

if has_cudnn "$dir"; then
  site=$dir
elif has_cudnn "$dir/site"; then
  site=$dir/site
else
  site=$dir/site
  echo "setup-cudnn: installing ${CUDNN_PACKAGE}==${CUDNN_VERSION} into $site" >&2
  python3 -m pip install --quiet --no-cache-dir --upgrade ${base:+--no-deps} --target "$site" "${CUDNN_PACKAGE}==${CUDNN_VERSION}" >&2
  has_cudnn "$site" || { echo "setup-cudnn: install did not produce libcudnn.so.9 in $site" >&2; exit 1; }
fi

if [[ -n $base ]]; then
  # Only cuDNN here: its dependencies and the stand-in come from the base install's path.
  base_path=$(bash "$here/setup-cudnn.sh" "$base" | tail -n 1)
  echo "$site/nvidia/cudnn/lib:${base_path#*:}"
  exit 0
fi

stub_dir=$dir/libcuda-stub
stub=$stub_dir/libcuda.so.1
if [[ ! -e $stub || $here/libcuda_stub.c -nt $stub ]]; then
  mkdir -p "$stub_dir"
  gcc -shared -fPIC -O2 -Wall -Wextra -Wl,-soname,libcuda.so.1 -o "$stub.tmp" "$here/libcuda_stub.c" >&2
  mv "$stub.tmp" "$stub"
  echo "setup-cudnn: built $stub" >&2
fi

# cuDNN, then its dependencies (cuBLAS/cuBLASLt, NVRTC: whatever nvidia/*/lib the wheels made),
# then the stand-in.
path=$site/nvidia/cudnn/lib
for lib in "$site"/nvidia/*/lib; do
  [[ $lib == "$site/nvidia/cudnn/lib" ]] && continue
  path=$path:$lib
done
path=$path:$stub_dir
echo "$path"
