#!/usr/bin/env bash
# CI (issue 35): the public API of every publishable crate keeps semver against its last release on
# crates.io (CHANGELOG.md: from 0.1.0 on, a release that breaks the API of 0.x.y bumps x).
#
# A crate with no release yet has nothing to compare with: the script says so and checks nothing
# for it (so until 0.1.0 is published this step costs one index look-up per crate). Once a crate
# has a release, `cargo semver-checks` compares the working tree with it; it is installed here
# when missing (a source build of a few minutes, paid only once a release exists), at the
# version pinned below.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly SEMVER_CHECKS_VERSION=0.51.0

crates=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != []:
        print(p["name"])')

released=()
for crate in $crates; do
  # `cargo info` asks the crates.io index; "could not find" is the only answer that means "not
  # released", anything else (no network) is a failure, not a pass.
  if out=$(cargo info --registry crates-io "$crate" 2>&1); then
    version=$(sed -n 's/^version: *\([^ ]*\).*/\1/p' <<<"$out" | head -n 1)
    echo "semver-checks: $crate $version is on crates.io: comparing with it" >&2
    released+=("$crate")
  elif grep -q "could not find \`$crate\`" <<<"$out"; then
    echo "semver-checks: $crate has no release on crates.io yet: nothing to compare with"
  else
    echo "semver-checks: could not ask crates.io about $crate:" >&2
    echo "$out" >&2
    exit 1
  fi
done

((${#released[@]})) || exit 0

if ! cargo semver-checks --version >/dev/null 2>&1; then
  cargo install --locked "cargo-semver-checks@$SEMVER_CHECKS_VERSION"
fi
args=()
for crate in "${released[@]}"; do args+=(--package "$crate"); done
cargo semver-checks check-release "${args[@]}"
