#!/usr/bin/env bash
# One GPU visit, run ON the device machine from the repository root after shared/device/pack.sh
# filled .gpu/ (device tool: carry [".gpu"], command `bash kvpool-cuda/gpu-visit.sh`, timeout ~540 s):
#   1. kvpool-cuda's tests, GPU required, run from kvpool-cuda/ (about 1 min)
#   2. BlockCopyBenchmark: 3 variants x 4 page sizes, one fork each (about 2-3 min)
# Full logs: $OUT/tests.log, $OUT/jmh.log; JMH JSON: $OUT/blockcopy.json; JUnit XML: $OUT/junit;
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
say "=== 2/2 JMH BlockCopyBenchmark (-f 1 -wi 2 -i 3, 1 s iterations) ==="
timeout 330 bash .gpu/run.sh jmh BlockCopyBenchmark -f 1 -wi 2 -i 3 -foe true -rf json -rff "$OUT/blockcopy.json" > "$OUT/jmh.log" 2>&1
rc=$?
grep -E '^BlockCopyBenchmark: ' "$OUT/jmh.log" | sort -u | tee -a "$summary"
grep -E 'Exception|Error' "$OUT/jmh.log" | sort | uniq -c | head -n 10 | cut -c1-300 | tee -a "$summary"
sed -n '/^Benchmark .*Mode/,$p' "$OUT/jmh.log" | tee -a "$summary"
say "jmh: exit $rc$( ((rc == 124)) && echo ' (timed out)')"
((rc == 0)) || fail=1

say ""
say "=== gpu-visit done: $( ((fail == 0)) && echo OK || echo FAILED ) ==="
exit $fail
