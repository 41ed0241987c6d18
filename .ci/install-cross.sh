#!/usr/bin/env bash
# Installs the aarch64 cross toolchain the NEON gate needs (DEVELOPERS.md, "NEON under qemu"):
#   - Debian's rustc-web (/usr/bin/rustc, 1.96) and its aarch64 std (libstd-rust-web-dev:arm64),
#     because rustup cannot download the aarch64 std here (only package registries are reachable);
#   - gcc-aarch64-linux-gnu (+ libc6-dev-arm64-cross) as the linker, with a static glibc;
#   - qemu-user-static, whose qemu-aarch64-static runs the test binaries.
# Idempotent: exits at once when everything is already there. Needs root (or sudo) and apt.
set -euo pipefail

PKGS=(rustc-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)

missing() {
    local p
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}

ready() {
    [ -z "$(missing)" ] &&
        [ -x /usr/bin/rustc ] &&
        [ -d /usr/lib/rustlib/aarch64-unknown-linux-gnu/lib ] &&
        command -v aarch64-linux-gnu-gcc >/dev/null &&
        command -v qemu-aarch64-static >/dev/null
}

if ready; then
    echo "install-cross: aarch64 cross toolchain already installed ($(/usr/bin/rustc --version))"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        SUDO=(sudo)
    else
        echo "install-cross: must run as root (or with sudo) to apt-get install: $(missing | tr '\n' ' ')" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null; then
    echo "install-cross: apt-get not found; install by hand: ${PKGS[*]} (see DEVELOPERS.md)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${SUDO[@]}" dpkg --add-architecture arm64
fi
"${SUDO[@]}" apt-get update -q
# libstd-rust-web-dev:arm64 must be the same version as rustc-web (Multi-Arch: same); apt
# resolves that from the one candidate both share.
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PKGS[@]}"

if ! ready; then
    echo "install-cross: installed, but still missing: $(missing | tr '\n' ' ')" >&2
    [ -d /usr/lib/rustlib/aarch64-unknown-linux-gnu/lib ] ||
        echo "install-cross: /usr/lib/rustlib/aarch64-unknown-linux-gnu/lib does not exist" >&2
    exit 1
fi
echo "install-cross: done ($(/usr/bin/rustc --version), $(aarch64-linux-gnu-gcc --version | head -1))"
