#!/usr/bin/env bash
# Build deploy/Dockerfile with buildah on a machine that cannot pull base images: the two bases
# the Dockerfile names are made here from Debian's packages (debootstrap) — debian:bookworm-slim
# as a minimal Debian, rust:1.92-bookworm as Debian with gcc and this machine's Rust toolchain —
# and tagged with those names; then the Dockerfile is built as written.
#   deploy/build-image.sh [image tag]      (root; Debian's buildah and debootstrap)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-localhost/memproxy:latest}"
B=(buildah --storage-driver vfs)
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# import DIR NAME: a root file system as an image called NAME.
import() {
  local ctr mnt
  ctr=$("${B[@]}" from scratch)
  mnt=$("${B[@]}" mount "$ctr")
  cp -a "$1/." "$mnt/"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" commit -q "$ctr" "$2" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
}

echo "build-image: debian:bookworm-slim from debootstrap" >&2
debootstrap --variant=minbase bookworm "$WORK/slim" "$MIRROR" >"$WORK/slim.log"
import "$WORK/slim" docker.io/library/debian:bookworm-slim

echo "build-image: rust:1.92-bookworm from debootstrap and $(rustc --version)" >&2
debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$WORK/rust" "$MIRROR" \
  >"$WORK/rust.log"
SYSROOT=$(rustc --print sysroot)
mkdir -p "$WORK/rust/usr/local/rust"
cp -a "$SYSROOT/." "$WORK/rust/usr/local/rust/"
for t in cargo rustc; do ln -sf "/usr/local/rust/bin/$t" "$WORK/rust/usr/local/bin/$t"; done
# This machine's own CAs (e.g. of a proxy that inspects TLS), so that the build stage's downloads
# (pip, cargo) trust what this machine trusts.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$WORK/rust/usr/local/share/ca-certificates/"
  chroot "$WORK/rust" update-ca-certificates >/dev/null
fi
import "$WORK/rust" docker.io/library/rust:1.92-bookworm

echo "build-image: deploy/Dockerfile → $TAG" >&2
"${B[@]}" bud --isolation chroot --layers=false -f deploy/Dockerfile -t "$TAG" .
