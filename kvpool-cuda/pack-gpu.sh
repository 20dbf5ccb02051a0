#!/usr/bin/env bash
# Packs the project for a GPU visit: kvpool-cuda/gpu/pack.sh (build, classes, test-scope dependencies, JUnit
# console launcher, benchmarks.jar, a trimmed JDK 25 runtime and run.sh, all under .gpu/), then drops from
# .gpu/lib the jars that only the live page's browser test needs (Selenium and what it pulls in: Guava,
# OpenTelemetry, Byte Buddy). No test the visit runs loads them (gpu-visit.sh filters by package and class name
# before loading), and with them the pack is over 64 MiB, the most a pack may hold to travel with a checkout to
# the GPU host. Micrometer and the Prometheus registry stay: the example's role servers, which the visit starts
# in JVMs of their own, export their metrics through them. Where nvcc is found it also builds copy_sweep into
# .gpu/bin. Runs from a normal checkout or a git worktree. Then, on the GPU host, from a checkout that holds
# .gpu/: `bash kvpool-cuda/gpu-visit.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash kvpool-cuda/gpu/pack.sh
shopt -s nullglob
dropped=0
for j in .gpu/lib/selenium-*.jar .gpu/lib/opentelemetry-*.jar .gpu/lib/byte-buddy-*.jar .gpu/lib/guava-*.jar \
         .gpu/lib/failureaccess-*.jar .gpu/lib/listenablefuture-*.jar .gpu/lib/j2objc-annotations-*.jar \
         .gpu/lib/error_prone_annotations-*.jar .gpu/lib/annotations-*.jar .gpu/lib/jspecify-*.jar \
         .gpu/lib/auto-service-annotations-*.jar; do
  rm -f "$j"
  dropped=$((dropped + 1))
done
# copy_sweep (kernel shapes against cudaMemcpyAsync, run by gpu-visit.sh): only where nvcc is; the visit skips it
# otherwise. Stripped, under 1 MiB (the CUDA runtime is linked statically).
rm -rf .gpu/bin
if command -v "${NVCC:-nvcc}" >/dev/null; then
  mkdir -p .gpu/bin
  "${NVCC:-nvcc}" -O3 -std=c++17 -arch=sm_90 -o .gpu/bin/copy_sweep kvpool-cuda/src/test/cuda/copy_sweep.cu
  strip .gpu/bin/copy_sweep
else
  echo "pack-gpu.sh: no nvcc, so no copy_sweep in the pack"
fi
size=$(du -sm .gpu | cut -f1)
echo "pack-gpu.sh: dropped $dropped browser-test jars; .gpu holds $size MiB"
if ((size > 60)); then
  echo "pack-gpu.sh: still too large to carry with the tree (limit 64 MiB in all)" >&2
  exit 1
fi
