#!/bin/bash
# Packs what bench/gpu.sh needs on a GPU machine that has CUDA but none of
# headroom's build dependencies (this workplace's device machine: nothing can
# be installed there, and what travels is at most 64 MiB):
#
#   bench/gpu-bundle.sh [BUILD]     # default build/, configured with nvcc
#
# writes .gpu-bundle/bundle.tar.xz (git-ignored): headroom and
# headroom_gputests from BUILD, stripped; every shared library they load
# except glibc's, libstdc++/libgcc and CUDA's (the GPU machine's own); and
# ONNX's node tests. bench/gpu.sh --prebuilt .gpu-bundle unpacks it and runs
# those binaries instead of building. The binaries are built here (Debian
# 12, glibc 2.36) and run where glibc is as new or newer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=$root/.gpu-bundle
for b in tools/headroom test/headroom_gputests; do
  [ -x "$build/$b" ] || { echo "gpu-bundle: $build/$b is missing (build with nvcc first)" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"
strip -o "$stage/bin/headroom" "$build/tools/headroom"
strip -o "$stage/bin/headroom_gputests" "$build/test/headroom_gputests"
ldd "$build/tools/headroom" "$build/test/headroom_gputests" | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|/usr/local/cuda|ld-linux' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true
if [ -d /usr/share/libonnx-testdata/data/node ]; then
  mkdir -p "$stage/node"
  cp -r /usr/share/libonnx-testdata/data/node/. "$stage/node/"
fi
tar -C "$stage" -cf - . | xz -T0 -6 >"$out/bundle.tar.xz.tmp"
mv "$out/bundle.tar.xz.tmp" "$out/bundle.tar.xz"
du -h "$out/bundle.tar.xz"
