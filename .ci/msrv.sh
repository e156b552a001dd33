#!/usr/bin/env bash
# CI (issue 35): the declared MSRV (`rust-version` of the workspace, inherited by every publishable
# crate) is a toolchain that builds the workspace.
#
# - Every publishable crate must declare a rust-version, all the same one.
# - When rust-toolchain.toml pins exactly that version (today: 1.95.0), the cargo that runs this
#   script is that toolchain, and every other step of .ci/run (clippy over all targets, the tests,
#   `cargo package`'s verify builds) builds the workspace with it: the script checks that rustc
#   really is that version and says so, without building anything twice.
# - When the pin moves on (a newer channel, `stable`, `nightly`), the MSRV is no longer what CI
#   builds with: the script installs that toolchain (rustup, minimal profile) and runs
#   `cargo check --workspace --all-targets --locked` with it.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
meta = json.load(sys.stdin)
declared = {}
for p in meta["packages"]:
    if p.get("publish") == []:
        continue
    if not p.get("rust_version"):
        sys.exit("msrv: %s declares no rust-version (add rust-version.workspace = true)" % p["name"])
    declared.setdefault(p["rust_version"], []).append(p["name"])
if len(declared) != 1:
    sys.exit("msrv: the publishable crates declare different rust-versions: %s" % declared)
print(next(iter(declared)))')

# `1.95` means 1.95.0 to cargo.
full=$msrv
[[ $full =~ ^[0-9]+\.[0-9]+$ ]] && full=$full.0
pinned=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)

if [[ $pinned == "$full" ]]; then
  running=$(rustc --version | awk '{print $2}')
  if [[ $running != "$full" ]]; then
    echo "msrv: rust-toolchain.toml pins $pinned but rustc is $running (RUSTUP_TOOLCHAIN set?)" >&2
    exit 1
  fi
  echo "msrv: rust-version $msrv is the pinned toolchain ($running): every build of .ci/run checks it"
  exit 0
fi

echo "msrv: rust-toolchain.toml pins $pinned, the crates declare $msrv: checking with $full" >&2
rustup toolchain install "$full" --profile minimal >&2
cargo "+$full" check --workspace --all-targets --locked --target-dir target/msrv
echo "msrv: the workspace builds with rust $full"
