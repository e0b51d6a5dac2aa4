#!/usr/bin/env bash
# What a user installs: packages the crate (no warnings allowed), unpacks it,
# and builds a scratch crate that depends on the unpacked package and holds
# every Rust example of the README and docs/, with only the dependencies a
# user would add. Also checks rust-version against the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

python3 .ci/msrv.py

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo package --no-verify --allow-dirty --target-dir "$work/target" 2>"$work/package.log" || {
    cat "$work/package.log" >&2
    exit 1
}
if grep -i '^warning' "$work/package.log"; then
    echo "cargo package warned (above)" >&2
    exit 1
fi
crate=$(ls "$work"/target/package/redfence-*.crate)
tar -xzf "$crate" -C "$work"
unpacked=$(ls -d "$work"/redfence-*/)
echo "packaged: $(basename "$crate"), $(tar -tzf "$crate" | wc -l) files"

mkdir -p "$work/user/src"
cat >"$work/user/Cargo.toml" <<TOML
[package]
name = "a-user-of-redfence"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
redfence = { path = "$unpacked", features = ["tls-rustls", "metrics", "tracing"] }
metrics = "0.24"
metrics-exporter-prometheus = { version = "0.18", default-features = false }

[workspace]
TOML
echo 'fn main() {}' >"$work/user/src/main.rs"
python3 .ci/extract_examples.py "$work/user/examples" README.md docs/*.md
cp Cargo.lock "$work/user/Cargo.lock"
# The repository's target directory: dependencies built there are reused.
(cd "$work/user" && cargo build --quiet --examples --target-dir "$repo/target")
echo "every README and docs/ example builds in a user's crate"
