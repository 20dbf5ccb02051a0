#!/usr/bin/env bash
# One GPU run, on a CUDA host without Java, from the root of a checkout whose .gpu/ kvpool-cuda/pack-gpu.sh
# (kvpool-cuda/gpu/pack.sh, trimmed) filled; allow it 10 minutes:
#   1. kvpool-cuda's tests, GPU required, run from kvpool-cuda/ (11 s on an H200; io.kvpool.cuda includes its
#      subpackage io.kvpool.cuda.ipc: the CUDA IPC transport's two-JVM tests, CudaIpcTwoProcessGpuTest).
#      KernelEmulationTest, MemcpyBatchAbiTest and the stub-driver tests (JCudaExceptionsTest,
#      ExportedArenaLifetimeTest, VirtualThreadContextTest, DeviceFillTailTest, DeviceBatchCleanupTest, IpcEngineCloseTest,
#      CloseWithoutProofTest)
#      are excluded: they need no GPU and run in CI already. DevicePageStorageGpuTest allocates one 4.3 GB pool (a tail
#      fill on planes past 2 GiB).
#   1b. examples' DeviceRolesGpuTest (the example server's --device cuda, three role JVMs on the GPU), from examples/.
#   1c. copy_sweep, if packed: page-copy kernel shapes against one cudaMemcpyAsync (about 10 s).
#   2. three JMH runs, BlockCopyBenchmark (3 variants × 4 page sizes = 12 forks), OffloadBenchmark (6
#      variants: kernel and cuMemcpyBatchAsync engines, contiguous ceilings; 24 forks), then ChecksumBenchmark
#      (checksum kernel and contiguous copy; 8 forks), one fork at a time
#      (~8.5 s a fork). To fit, warm-up is ONE 0.5 s iteration instead of the classes' two 1 s ones
#      (measurement unchanged: three 1 s iterations). Memory, one fork at a time: BlockCopy about 9 GiB of
#      device memory, Offload 768 MiB device + 512 MiB pinned host.
#      No -foe: a failing variant (e.g. a driver without cuMemcpyBatchAsync) must not cost the other
#      measurements; JMH's "<failure>" lines mark the run failed instead.
# Time: at most 90 + 60 + 30 + 130 + 180 + 90 = 580 s of timeouts; give the run 600 s. On an H200 (2026-12-04)
# the tests took 11 + 5 s and a JMH fork about 5 s: the whole visit about 4 minutes.
# Out ($OUT, default .gpu/out; few files, for runners that bring back at most 8): summary.txt (the short version), tests.log
# (both test runs), junit.tgz (JUnit XML), jmh-{blockcopy,offload,checksum}.json, jmh-logs.tgz (the three JMH logs): 7 files.
# Runs every part even if one fails; exits non-zero if anything failed. (JUnit: run.sh scans the class path, so filter with
# --include-package; the console launcher refuses --select-package together with scanning.)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OUT=${OUT:-$PWD/.gpu/out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$@" | tee -a "$summary"; }
fail=0

say "=== gpu-visit $(date -u +%FT%TZ) on $(hostname) ==="
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_mode,persistence_mode --format=csv,noheader 2>&1 | tee -a "$summary"

say ""
say "=== kvpool-cuda tests (io.kvpool.cuda, kvpool.gpu.required=true) ==="
# from kvpool-cuda/ as under surefire: FatbinResourceTest reads src/main/cuda/ relative to it, and
# jqwik writes its database under ./target/ (which a fresh machine lacks)
(cd kvpool-cuda && mkdir -p target && timeout 90 bash ../.gpu/run.sh tests --include-package=io.kvpool.cuda \
  --exclude-classname='.*(KernelEmulationTest|MemcpyBatchAbiTest|JCudaExceptionsTest|ExportedArenaLifetimeTest|VirtualThreadContextTest|DeviceFillTailTest|DeviceBatchCleanupTest|IpcEngineCloseTest|CloseWithoutProofTest)') > "$OUT/tests.log" 2>&1
rc=$?
grep -E '^\[ +[0-9]+ tests (found|successful|failed|aborted|skipped)' "$OUT/tests.log" | tee -a "$summary"
grep -E 'MethodSource|=> ' "$OUT/tests.log" | head -n 40 | cut -c1-300 | tee -a "$summary"
say "tests: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
((rc == 0)) || fail=1

say ""
say ""
say "=== examples: DeviceRolesGpuTest (--device cuda: three role processes on the GPU) ==="
[[ -d $OUT/junit ]] && mv "$OUT/junit" "$OUT/junit-cuda" # run.sh always reports into $OUT/junit
exlog=$(mktemp)
(cd examples && mkdir -p target && timeout 60 bash ../.gpu/run.sh tests --include-classname='.*DeviceRolesGpuTest') > "$exlog" 2>&1
rc=$?
{ echo; echo "=== examples: DeviceRolesGpuTest ==="; cat "$exlog"; } >> "$OUT/tests.log"
grep -E '^\[ +[0-9]+ tests (found|successful|failed|aborted|skipped)' "$exlog" | tee -a "$summary"
grep -E 'MethodSource|=> ' "$exlog" | head -n 20 | cut -c1-300 | tee -a "$summary"
rm -f "$exlog"
say "examples GPU test: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
((rc == 0)) || fail=1

# JUnit writes one XML per engine; the device tool brings back only 8 files: pack them as one.
[[ -d $OUT/junit ]] && mv "$OUT/junit" "$OUT/junit-examples"
tar czf "$OUT/junit.tgz" -C "$OUT" $(cd "$OUT" && ls -d junit-* 2>/dev/null) && rm -rf "$OUT"/junit-*

# The JMH runs, each with its own JSON, so a timeout in a later one cannot lose an earlier one's results.
jmh() { # name regex forks timeout
  say ""
  say "=== JMH $1 (-f 1 -wi 1 -w 500ms -i 3 -r 1s, $3 forks, timeout $4 s) ==="
  timeout "$4" bash .gpu/run.sh jmh "$2" -f 1 -wi 1 -w 500ms -i 3 -r 1s -rf json -rff "$OUT/jmh-$1.json" > "$OUT/jmh-$1.log" 2>&1
  local rc=$? failures
  failures=$(grep -c '<failure>' "$OUT/jmh-$1.log")
  if ((failures > 0)); then
    say "jmh $1: $failures benchmark(s) failed:"
    grep -A3 '<failure>' "$OUT/jmh-$1.log" | cut -c1-300 | head -n 30 | tee -a "$summary"
    ((rc != 0)) || rc=1
  fi
  grep -E '^(BlockCopy|Offload)Benchmark: ' "$OUT/jmh-$1.log" | sort -u | tee -a "$summary"
  grep -E 'Exception|Error' "$OUT/jmh-$1.log" | sort | uniq -c | head -n 10 | cut -c1-300 | tee -a "$summary"
  sed -n '/^Benchmark .*Mode/,$p' "$OUT/jmh-$1.log" | tee -a "$summary"
  # The rates (GB/s, ms, µs, MiB) are @AuxCounters(EVENTS), which JMH SUMS over the measured iterations: the
  # table's score is Cnt × the per-iteration value. The per-iteration means, for the README:
  say "per-iteration means of the :counters (score / Cnt):"
  sed -n '/^Benchmark .*Mode/,$p' "$OUT/jmh-$1.log" | awk '/:(deviceGBps|hostGBps|deviceMs|submitUs|opMiB) / {
      for (i = 2; i < NF; i++) if ($i == "avgt" || $i == "thrpt" || $i == "ss") { m = i; break }
      params = ""; for (j = 2; j < m; j++) params = params " " $j
      if ($(m + 1) > 0) printf "  %s%s  %.3f\n", $1, params, $(m + 2) / $(m + 1) }' | tee -a "$summary"
  say "jmh $1: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
  ((rc == 0)) || fail=1
}
say ""
say "=== copy_sweep (kernel shapes against one cudaMemcpyAsync; kvpool-cuda/src/test/cuda/copy_sweep.cu) ==="
if [[ -x .gpu/bin/copy_sweep ]]; then
  timeout 30 .gpu/bin/copy_sweep 2>&1 | tee -a "$summary"
  rc=${PIPESTATUS[0]}
  say "copy_sweep: exit $rc"
  ((rc == 0)) || fail=1
else
  say "copy_sweep: not packed (pack-gpu.sh builds it where nvcc is found)"
fi

jmh blockcopy 'BlockCopyBenchmark' 12 130
jmh offload 'OffloadBenchmark' 24 180
jmh checksum 'ChecksumBenchmark' 8 90
# at most 8 files come back: the three JMH logs travel as one archive (their tables are in summary.txt)
tar czf "$OUT/jmh-logs.tgz" -C "$OUT" jmh-blockcopy.log jmh-offload.log jmh-checksum.log 2>/dev/null \
  && rm -f "$OUT"/jmh-*.log

say ""
say "=== gpu-visit done: $( ((fail == 0)) && echo OK || echo FAILED ) ==="
exit $fail
