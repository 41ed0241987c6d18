#!/usr/bin/env bash
# Bytes per module of the static musl binary (bench/README.md, "Binary size").
#
#   bash bench/binary_size.sh OUT.tsv [LABEL=BINARY:MAP ...]
#
# Builds the binary of .ci/run's `static_binary` (the same bytes: the two extra flags only
# write a link map and name the generic arguments in the symbols, which are stripped), keeps
# it and its map in target/binary-size/, and writes OUT.tsv with one column per earlier
# LABEL=BINARY:MAP given (e.g. a copy kept from before a change) and one for this build
# ("now"). Needs c++filt (binutils) and python3. One fat-LTO release build: minutes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$1"
shift
mkdir -p target/binary-size
map="$PWD/target/binary-size/k3.map"
rustup target add x86_64-unknown-linux-musl
RUSTFLAGS="-C relocation-model=static -C symbol-mangling-version=v0 -C link-arg=-Wl,-Map=$map" \
    cargo build --release --target x86_64-unknown-linux-musl -p k3 --bin k3
cp target/x86_64-unknown-linux-musl/release/k3 target/binary-size/k3
echo "static binary: $(stat -c %s target/binary-size/k3) bytes"
python3 bench/binary_size.py "$out" "$@" "now=target/binary-size/k3:$map"
