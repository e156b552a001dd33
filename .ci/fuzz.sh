#!/usr/bin/env bash
# CI fuzzing (fuzz/README.md): installs what the libFuzzer targets need from scratch (a nightly
# toolchain, a pinned cargo-fuzz), builds the targets, replays each committed corpus, then fuzzes
# each target for a bounded time on one worker. Any crash, panic or sanitizer report fails CI and
# leaves the input under fuzz/artifacts/<target>/. The payload target loads plans into cuDNN, so
# LD_LIBRARY_PATH must hold cuDNN 9.19 (.ci/run sets it; .ci/setup-cudnn.sh prints it).
#
# libFuzzer is single-threaded, so the targets run CUDNN_GRAPH_FUZZ_JOBS at a time (default 2, the
# CI machine's cores), each into a log of its own that is printed whole when the target finishes:
# the logs never interleave, and they come in the order the targets finish.
#
#   bash .ci/fuzz.sh                           # 90 s per target
#   CUDNN_GRAPH_FUZZ_SECONDS=600 bash .ci/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."

readonly CARGO_FUZZ_VERSION=0.13.1
readonly TARGETS=(structure payload builder ubjson frontend_payload macro_input page_tables tuning_store ragged_offsets)
toolchain=${CUDNN_GRAPH_FUZZ_TOOLCHAIN:-nightly}
seconds=${CUDNN_GRAPH_FUZZ_SECONDS:-90}
jobs=${CUDNN_GRAPH_FUZZ_JOBS:-2}

step() { echo "== fuzz: $* ($(date +%T))" >&2; }

step "toolchain $toolchain"
rustup toolchain install "$toolchain" --profile minimal
if ! cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  step "cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# `-s none`: the targets are safe Rust over a prebuilt libcudnn that no sanitizer instruments;
# overflow checks and debug assertions are on in every crate (fuzz/Cargo.toml's profile).
flags=(--release --sanitizer none)
step "build"
cargo +"$toolchain" fuzz build "${flags[@]}"

# One target: the corpus replay, the regressions' replay, then fuzzing. Every step runs even if an
# earlier one fails; each failure is one line of the file `$2`, and the target's status is 1 then.
fuzz_target() {
  local target=$1 failures=$2 corpus=fuzz/corpus/$1 scratch status=0
  step "$target: replay $(find "$corpus" -type f | wc -l) corpus files"
  if ! cargo +"$toolchain" fuzz run "${flags[@]}" "$target" "$corpus" -- -runs=0; then
    echo "$target (corpus replay)" >>"$failures"
    status=1
  fi
  # The inputs that once crashed a target stay fixed (each directory's README says what they were;
  # as bytes it is one more input).
  if [[ -d fuzz/regressions/$target ]]; then
    step "$target: replay regressions"
    if ! cargo +"$toolchain" fuzz run "${flags[@]}" "$target" "fuzz/regressions/$target" -- -runs=0; then
      echo "$target (regressions)" >>"$failures"
      status=1
    fi
  fi
  # New inputs go to a scratch directory: the committed corpus changes only by regeneration
  # (fuzz/examples/make_seeds.rs) or by hand.
  scratch=$(mktemp -d)
  step "$target: fuzz ${seconds}s"
  if ! cargo +"$toolchain" fuzz run "${flags[@]}" "$target" "$scratch" "$corpus" -- \
    -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1; then
    echo "$target (see fuzz/artifacts/$target/)" >>"$failures"
    status=1
  fi
  rm -rf "$scratch"
  step "$target: $( ((status == 0)) && echo passed || echo FAILED)"
  return "$status"
}

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()
declare -A running=() # pid -> target

# Waits for one running target to finish, prints its log whole under a header, and adds its
# failures to the run's (a target that died without naming a failure is one by its exit status).
finish_one() {
  local pid= status=0 target
  wait -n -p pid "${!running[@]}" || status=$?
  target=${running[$pid]}
  unset "running[$pid]"
  echo "==== fuzz: $target, its whole log ====" >&2
  cat "$logs/$target.log" >&2
  if [[ -s $logs/$target.failed ]]; then
    mapfile -t -O "${#failed[@]}" failed <"$logs/$target.failed"
  elif ((status != 0)); then
    failed+=("$target (exit status $status)")
  fi
}

# Every target runs even if one fails, so one run reports every target's findings.
for target in "${TARGETS[@]}"; do
  : >"$logs/$target.failed"
  fuzz_target "$target" "$logs/$target.failed" >"$logs/$target.log" 2>&1 &
  running[$!]=$target
  step "$target: started (its log follows when it finishes)"
  while ((${#running[@]} >= jobs)); do
    finish_one
  done
done
while ((${#running[@]})); do
  finish_one
done
if ((${#failed[@]})); then
  step "failed: ${failed[*]}"
  exit 1
fi
step "done"
