#!/usr/bin/env bash
# Supply chain and semver checks (.ci/run; tools from .ci/setup):
#   cargo deny: licences, bans (no async runtime, no OpenSSL; duplicate
#     versions warned), sources (crates.io only): deny.toml. Advisories
#     only where their database can be fetched.
#   cargo semver-checks: the public API against $SEMVER_BASELINE, a pinned
#     commit of main (no release tag exists yet: move it to the release
#     tag at the first release).
#
#   bash .ci/supply-chain.sh              # both checks
#   bash .ci/supply-chain.sh deny         # one of them
#   bash .ci/supply-chain.sh semver
#   bash .ci/supply-chain.sh --build-semver  # builds the pinned
#                                         # cargo-semver-checks once into the
#                                         # tools folder (about 16 CPU-minutes)
#   bash .ci/supply-chain.sh --self-test  # each check must fail on a
#                                         # planted problem, in a scratch copy
#   bash .ci/supply-chain.sh --self-test semver  # also the semver plant
#                                         # (builds rustdoc twice: minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${REDFENCE_TOOLS_DIR:-$HOME/.cache/redfence-tools}/bin:$HOME/.cargo/bin:$PATH"

# Moved, before the first release, only for an intended API change: to
# the fair lock's (FairLock, Error::Skipped, and the request registry's
# Key::Queue and Aspect::Order in `testing`), which the check reported
# against ad227b8 as a major change of the registry's enums.
SEMVER_BASELINE=0e285307517f551f985a810a28abcea87e9737cf
SEMVER_CHECKS_VERSION=0.51.0
TOOLS_DIR="${REDFENCE_TOOLS_DIR:-$HOME/.cache/redfence-tools}"

build_semver() {
  if cargo-semver-checks --version 2>/dev/null | grep -q " $SEMVER_CHECKS_VERSION\$"; then
    return 0
  fi
  echo "building cargo-semver-checks $SEMVER_CHECKS_VERSION into $TOOLS_DIR" >&2
  cargo install --quiet --locked --root "$TOOLS_DIR" "cargo-semver-checks@$SEMVER_CHECKS_VERSION"
}

deny() {
  cargo-deny check bans licenses sources
  # The advisory database is fetched from a git host; where it cannot be
  # (no network but the package registries), say so and go on.
  if timeout 120 cargo-deny fetch db >/dev/null 2>&1; then
    cargo-deny check advisories
  else
    echo "== cargo deny: the advisory database could not be fetched: advisories check skipped" >&2
  fi
}

semver() {
  if ! git cat-file -e "$SEMVER_BASELINE^{commit}" 2>/dev/null; then
    echo "== cargo semver-checks: baseline $SEMVER_BASELINE not in this clone's history: skipped" >&2
    return 0
  fi
  cargo semver-checks check-release --baseline-rev "$SEMVER_BASELINE" \
    --features testing,tls-rustls,metrics,tracing
}

# A scratch clone of HEAD (with its history, for the baseline) where a
# problem is planted.
scratch() {
  local dir
  dir="$(mktemp -d)"
  git clone --quiet --shared . "$dir"
  git -C "$dir" checkout --quiet --detach "$(git rev-parse HEAD)"
  cp deny.toml "$dir/" # as it is now, committed or not
  echo "$dir"
}

expect_failure() { # NAME COMMAND...: the check must fail
  local name=$1
  shift
  if "$@"; then
    echo "SELF-TEST FAILED: $name passed on a planted problem" >&2
    return 1
  fi
  echo "== self-test: $name failed on its planted problem, as it must" >&2
}

self_test() {
  local dir
  dir="$(scratch)"
  SCRATCH_DIR=$dir
  trap 'rm -rf "$SCRATCH_DIR"' EXIT
  # A banned crate in the default build.
  sed -i 's/^\[dependencies\]$/[dependencies]\ntokio = "1"/' "$dir/Cargo.toml"
  (cd "$dir" && cargo metadata --format-version 1 >/dev/null) # adds tokio to the lock file
  expect_failure "cargo deny (tokio planted)" bash -c "cd '$dir' && cargo-deny check bans"
  if [ "${1:-}" = semver ]; then
    git -C "$dir" checkout -q -- Cargo.toml Cargo.lock
    # A public item removed.
    sed -i '/^pub use protocol::value::MAX_IDENTITY_LEN;$/d' "$dir/src/lib.rs"
    expect_failure "cargo semver-checks (MAX_IDENTITY_LEN removed)" bash -c "cd '$dir' && $(declare -f semver); SEMVER_BASELINE=$SEMVER_BASELINE semver"
  fi
}

case "${1:-}" in
  --self-test) self_test "${2:-}" ;;
  --build-semver) build_semver ;;
  deny) deny ;;
  semver) semver ;;
  "") deny && semver ;;
  *) echo "usage: $0 [deny | semver | --build-semver | --self-test [semver]]" >&2; exit 64 ;;
esac
