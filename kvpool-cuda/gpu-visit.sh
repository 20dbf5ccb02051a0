#!/usr/bin/env bash
# One GPU visit, run ON the device machine from the repository root after shared/device/pack.sh
# filled .gpu/ (device tool: carry [".gpu"], command `bash kvpool-cuda/gpu-visit.sh`, timeout ~540 s):
#   1. kvpool-cuda's tests, GPU required, run from kvpool-cuda/ (about 1.5 min; io.kvpool.cuda includes its
#      subpackage io.kvpool.cuda.ipc: the CUDA IPC transport's two-JVM tests, CudaIpcTwoProcessGpuTest;
#      the CPU-emulation and cuda.h ABI tests skip there: no g++, no CUDA headers)
#   2. one JMH run of BlockCopyBenchmark (3 variants) and OffloadBenchmark (6 variants: kernel and
#      cuMemcpyBatchAsync engines, contiguous ceilings), 4 page sizes each: 36 forks, one at a time
#      (about 5 min at ~8.5 s a fork). To fit, warm-up is ONE 0.5 s iteration instead of the classes' two
#      1 s ones (measurement unchanged: three 1 s iterations). Memory, one fork at a time: BlockCopy about
#      9 GiB of device memory, Offload 768 MiB device + 512 MiB pinned host.
#      No -foe: a failing variant (e.g. a driver without cuMemcpyBatchAsync) must not cost the other
#      measurements; JMH's "<failure>" lines mark the run failed instead.
# Time: at most 150 s + 370 s of timeouts, under the ~540 s a visit may take.
# Full logs: $OUT/tests.log, $OUT/jmh.log; JMH JSON (both benchmarks): $OUT/jmh.json; JUnit XML: $OUT/junit;
# the short version: $OUT/summary.txt. Runs both parts even if the first fails; exits non-zero if
# anything failed. (JUnit: run.sh scans the class path, so filter with --include-package; the
# console launcher refuses --select-package together with scanning.)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OUT=${OUT:-$PWD/.gpu/out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$@" | tee -a "$summary"; }
fail=0

say "=== gpu-visit $(date -u +%FT%TZ) on $(hostname) ==="
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | tee -a "$summary"

say ""
say "=== 1/2 kvpool-cuda tests (io.kvpool.cuda, kvpool.gpu.required=true) ==="
# from kvpool-cuda/ as under surefire: FatbinResourceTest reads src/main/cuda/ relative to it, and
# jqwik writes its database under ./target/ (which a fresh machine lacks)
(cd kvpool-cuda && mkdir -p target && timeout 150 bash ../.gpu/run.sh tests --include-package=io.kvpool.cuda) > "$OUT/tests.log" 2>&1
rc=$?
grep -E '^\[ +[0-9]+ tests (found|successful|failed|aborted|skipped)' "$OUT/tests.log" | tee -a "$summary"
grep -E 'MethodSource|=> ' "$OUT/tests.log" | head -n 40 | cut -c1-300 | tee -a "$summary"
say "tests: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
((rc == 0)) || fail=1

say ""
say "=== 2/2 JMH BlockCopyBenchmark + OffloadBenchmark (-f 1 -wi 1 -w 500ms -i 3 -r 1s, 36 forks) ==="
timeout 370 bash .gpu/run.sh jmh '(BlockCopy|Offload)Benchmark' -f 1 -wi 1 -w 500ms -i 3 -r 1s -rf json -rff "$OUT/jmh.json" > "$OUT/jmh.log" 2>&1
rc=$?
failures=$(grep -c '<failure>' "$OUT/jmh.log")
if ((failures > 0)); then
  say "jmh: $failures benchmark(s) failed:"
  grep -A3 '<failure>' "$OUT/jmh.log" | cut -c1-300 | head -n 30 | tee -a "$summary"
  ((rc != 0)) || rc=1
fi
grep -E '^(BlockCopy|Offload)Benchmark: ' "$OUT/jmh.log" | sort -u | tee -a "$summary"
grep -E 'Exception|Error' "$OUT/jmh.log" | sort | uniq -c | head -n 10 | cut -c1-300 | tee -a "$summary"
sed -n '/^Benchmark .*Mode/,$p' "$OUT/jmh.log" | tee -a "$summary"
say "jmh: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
((rc == 0)) || fail=1

say ""
say "=== gpu-visit done: $( ((fail == 0)) && echo OK || echo FAILED ) ==="
exit $fail
