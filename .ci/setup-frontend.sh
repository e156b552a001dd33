#!/usr/bin/env bash
# Installs cudnn-frontend 1.32 (its Python package, which carries the C++ frontend compiled in)
# and the CUDA 13 runtime it links (libcudart.so.13) into DIR, unless they are there already, and
# prints two lines to export (on stdout; progress goes to stderr):
#
#   PYTHONPATH=DIR/site
#   LD_LIBRARY_PATH=DIR/site/nvidia/cu13/lib
#
# cudnn-frontend is the oracle of tests/suite/frontend_oracle.rs: deviceless (a device-properties JSON
# instead of a handle, cuDNN 9.19 and the libcuda stand-in of .ci/setup-cudnn.sh on the library
# path) it deserializes, validates, lowers and plans graphs and re-prints them. Only the two wheels
# are installed (--no-deps): the Python engines' dependencies (CUTLASS DSL, TVM FFI) are not needed
# for the C++ backend graph the oracle drives.
#
# tests/suite/frontend_oracle.rs hands them to the oracle's Python process when exported as
# CUDNN_GRAPH_FRONTEND_PYTHONPATH and CUDNN_GRAPH_FRONTEND_LD_LIBRARY_PATH (.ci/run does):
#
#   eval "$(bash .ci/setup-frontend.sh "$HOME/.cache/cudnn-frontend-ci" | sed 's/^/export CUDNN_GRAPH_FRONTEND_/')"
set -euo pipefail

readonly FRONTEND_PACKAGE=nvidia-cudnn-frontend
readonly FRONTEND_VERSION=1.32.0
readonly CUDART_PACKAGE=nvidia-cuda-runtime
readonly CUDART_SPEC='>=13,<14'

dir=${1:?usage: setup-frontend.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
site=$dir/site

has_frontend() {
  compgen -G "$site/nvidia_cudnn_frontend-${FRONTEND_VERSION}.dist-info" >/dev/null &&
    [[ -e $site/nvidia/cu13/lib/libcudart.so.13 ]]
}

if ! has_frontend; then
  echo "setup-frontend: installing ${FRONTEND_PACKAGE}==${FRONTEND_VERSION} and ${CUDART_PACKAGE}${CUDART_SPEC} into $site" >&2
  python3 -m pip install --quiet --no-cache-dir --upgrade --no-deps --target "$site" \
    "${FRONTEND_PACKAGE}==${FRONTEND_VERSION}" "${CUDART_PACKAGE}${CUDART_SPEC}" >&2
  has_frontend || { echo "setup-frontend: install did not produce cudnn-frontend and libcudart.so.13 in $site" >&2; exit 1; }
fi

echo "PYTHONPATH=$site"
echo "LD_LIBRARY_PATH=$site/nvidia/cu13/lib"
