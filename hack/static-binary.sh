#!/bin/sh
# Builds the binary of the image with the `dist` profile of Cargo.toml: C libraries vendored
# (`--features vendored`: libgit2, libssh2, OpenSSL and zlib built from source) and glibc linked
# statically (`+crt-static`), so it needs nothing from the image but a CA bundle
# (docs/design-decisions.md, "A self-contained binary for the image"). The Dockerfile and the
# image test (tests/image.rs) both build it here.
#
#   hack/static-binary.sh [more `cargo build` options]
#
# Prints the binary's absolute path on stdout; cargo reports on stderr. Honours CARGO, RUSTC,
# RUSTFLAGS and CARGO_TARGET_DIR.
set -eu
cd "$(dirname "$0")/.."

target="$("${RUSTC:-rustc}" -vV | sed -n 's/^host: //p')"
case "$target" in
  *-linux-gnu) ;;
  *) echo "hack/static-binary.sh: links glibc statically, so it builds on a *-linux-gnu host only (this is $target)" >&2; exit 2 ;;
esac
# `+crt-static` must not reach build scripts and proc-macros (loaded by rustc, so never static):
# with an explicit `--target`, RUSTFLAGS applies to the target's artifacts only.
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
  "${CARGO:-cargo}" build --profile dist --locked --features vendored --target "$target" "$@" >&2

dir="${CARGO_TARGET_DIR:-target}"
case "$dir" in
  /*) ;;
  *) dir="$(pwd)/$dir" ;;
esac
echo "$dir/$target/dist/cdtarget"
