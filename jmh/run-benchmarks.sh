#!/usr/bin/env bash
# Runs the four pool benchmarks against their naive baseline and records them:
#   jmh/results/<name>.json   JMH's JSON (-rf json)
#   jmh/results/<name>.txt    JMH's console output
#   jmh/results/<name>.md     the exact command, the machine, and the Markdown table (jmh/tools/jmh_table.py)
#
# usage: jmh/run-benchmarks.sh [JMH run options]
#   default options: -f 1 -wi 2 -i 5 -w 1s -r 1s   (short; raise them on a quiet machine)
#   RESULT_NAME=... names the result files (default: UTC timestamp)
# Always added: the benchmark regex (the four pool benchmarks), -prof gc (allocation per op), -rf json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

name=${RESULT_NAME:-$(date -u +%Y%m%dT%H%M%SZ)}
opts=("$@")
(( ${#opts[@]} )) || opts=(-f 1 -wi 2 -i 5 -w 1s -r 1s)
out=jmh/results
mkdir -p "$out"
json=$out/$name.json
# the pool benchmarks only: the transfer (ops/s, µs/op) and GPU ones have their own runs and tables, and
# jmh_table.py refuses their units
cmd=(./dev jmh 'io.kvpool.jmh.(AdmissionBenchmark|PageAllocBenchmark|ForkBenchmark|PrefixLookupBenchmark)' "${opts[@]}" -prof gc -rf json -rff "$json")

machine() {
  echo "- CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores available"
  echo "- Memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "- Kernel: $(uname -sr)"
  echo "- Load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
}

{
  echo "# kvpool benchmarks: $name"
  echo
  echo "Command (from the repository root):"
  echo
  echo '```'
  echo "${cmd[*]}"
  echo '```'
  echo
  echo "Commit: $(git rev-parse --short HEAD)$([[ -z $(git status --porcelain -- . ":!$out") ]] || echo ' (with uncommitted changes)')"
  echo
  machine
} > "$out/$name.md.tmp"

echo "running: ${cmd[*]}" >&2
"${cmd[@]}" 2>&1 | tee "$out/$name.txt"

{
  cat "$out/$name.md.tmp"
  echo "- Load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 jmh/tools/jmh_table.py --jvm "$json"
  echo
  python3 jmh/tools/jmh_table.py "$json"
} > "$out/$name.md"
rm -f "$out/$name.md.tmp"
echo "wrote $json, $out/$name.txt, $out/$name.md" >&2
cat "$out/$name.md"
