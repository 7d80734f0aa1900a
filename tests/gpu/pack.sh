#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs into .gpu/ (git-ignored) for the device machine, which cannot
# install packages: the built products, the test binaries, and every non-glibc shared library
# they load (spdlog, fmt, sqlite, libbpf, ...), found with ldd.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
rm -rf .gpu && mkdir -p .gpu/libs
for d in bin lib sim tests/bin gen; do
  [ -d "$BUILD/$d" ] && mkdir -p ".gpu/build/$d" && cp -a "$BUILD/$d/." ".gpu/build/$d/"
done
[ -f "$BUILD/tests/coloc-tests" ] && cp -a "$BUILD/tests/coloc-tests" .gpu/build/tests/
for f in $(find .gpu/build -type f -perm -u+x) .gpu/build/lib/*.so; do
  [ -f "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3}' | while read -r so; do
    case "$(basename "$so")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*|libgcc_s.so*|libstdc++.so*) ;;
      *) cp -n "$so" .gpu/libs/ ;;
    esac
  done
done
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
du -sh .gpu
