#!/usr/bin/env bash
# Compiles src/main/cuda/kvpool_kernels.cu (every kvpool kernel: the pool's and the CUDA IPC transport's
# put) into the ONE committed fatbin
#   src/main/resources/io/kvpool/cuda/kvpool_kernels.fatbin   (SASS sm_80, sm_90, sm_100; PTX compute_100)
# and writes kvpool_kernels.properties beside it (source sha256, nvcc version, archs, kernel names).
#
# The GPU machines have no nvcc, so the fatbin is committed. This script does nothing when the
# recorded source sha256, flags and kernel list already match (a normal build must not rewrite a committed
# binary); --force rebuilds anyway. Run from anywhere: it works relative to its own directory.
#
#   kvpool-cuda/build-kernels.sh [--force]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

SRC=src/main/cuda/kvpool_kernels.cu
OUT_DIR=src/main/resources/io/kvpool/cuda
FATBIN=$OUT_DIR/kvpool_kernels.fatbin
PROPS=$OUT_DIR/kvpool_kernels.properties
NVCC=${NVCC:-nvcc}
SASS_ARCHS="80 90 100"
PTX_ARCH=100
KERNELS="kvpool_copy_pages kvpool_gather_pages kvpool_scatter_pages kvpool_fill_pages kvpool_first_canary_token kvpool_page_checksums kvpool_ipc_put_pages"
# --no-compress: device code stays plain, so the kernel names are readable in the fatbin (the test checks them)
FLAGS="-fatbin -O3 -std=c++17 --no-compress"
for a in $SASS_ARCHS; do
  if [[ $a == "$PTX_ARCH" ]]; then
    FLAGS+=" -gencode arch=compute_$a,code=[sm_$a,compute_$a]"
  else
    FLAGS+=" -gencode arch=compute_$a,code=sm_$a"
  fi
done

force=0
[[ ${1:-} == --force ]] && force=1

sha=$(sha256sum "$SRC" | cut -d' ' -f1)
kernel_list=$(echo $KERNELS | tr ' ' ',')
prop() { sed -n "s/^$1=//p" "$PROPS" 2>/dev/null | head -n 1; }
if (( ! force )) && [[ -s $FATBIN && $(prop source.sha256) == "$sha" && $(prop nvcc.flags) == "$FLAGS" && $(prop kernels) == "$kernel_list" ]]; then
  echo "build-kernels: $FATBIN is up to date (source sha256 $sha)"
  exit 0
fi

command -v "$NVCC" >/dev/null || { echo "build-kernels: $NVCC not found; needed because $SRC changed" >&2; exit 1; }
version=$("$NVCC" --version | grep -m1 'release')
mkdir -p "$OUT_DIR"
tmp=$(mktemp "$OUT_DIR/.kvpool_kernels.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086  # FLAGS is a word list on purpose
"$NVCC" $FLAGS -o "$tmp" "$SRC"
mv -f "$tmp" "$FATBIN"
trap - EXIT

sass_list=$(for a in $SASS_ARCHS; do printf 'sm_%s,' "$a"; done)
{
  echo "# Written by kvpool-cuda/build-kernels.sh: do not edit (FatbinResourceTest checks it)"
  echo "source=$SRC"
  echo "source.sha256=$sha"
  echo "nvcc.version=$version"
  echo "nvcc.flags=$FLAGS"
  echo "archs.sass=${sass_list%,}"
  echo "archs.ptx=compute_$PTX_ARCH"
  echo "kernels=$kernel_list"
} > "$PROPS"
echo "build-kernels: wrote $FATBIN ($(stat -c %s "$FATBIN") bytes) and $PROPS"
