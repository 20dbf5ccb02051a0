#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after kvpool-cuda/pack-gpu.sh filled .gpu/ (it copies
# this file to .gpu/run.sh; the device tool carries .gpu/ with the tree):
#   bash .gpu/run.sh tests [JUnit console options]   the tests on the class path, GPU tests required
#   bash .gpu/run.sh jmh [JMH options]               the benchmarks' uber-jar
#   bash .gpu/run.sh main CLASS [args]               any main class on the full class path
# Reports land in $OUT when the device tool set it, else in .gpu/out. Every JVM gets
# --enable-native-access=ALL-UNNAMED (JCuda and JUCX load native libraries) and -Dkvpool.gpu.required=true,
# so a GPU test that would skip elsewhere fails here if it cannot find the device.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! command -v java >/dev/null || ! java -version 2>&1 | grep -q 'version "2[5-9]'; then
  [[ -x /tmp/jre/bin/java ]] || tar -C /tmp -xJf "$here/jre.tar.xz"
  export PATH=/tmp/jre/bin:$PATH
fi
out=${OUT:-$here/out}
mkdir -p "$out"
cp="$here/lib/*"
roots=""
for m in "$here"/mods/*; do
  [[ -d $m/classes ]] && cp="$cp:$m/classes"
  [[ -d $m/test-classes ]] && { cp="$cp:$m/test-classes"; roots="${roots:+$roots:}$m/test-classes"; }
done
jvm=(--enable-native-access=ALL-UNNAMED -Dkvpool.gpu.required=true)
what=${1:-tests}
shift || true
case $what in
  tests)
    java "${jvm[@]}" -cp "$here/junit-console.jar:$cp" org.junit.platform.console.ConsoleLauncher execute \
      --disable-banner --details=summary --details-theme=ascii --reports-dir="$out/junit" --fail-if-no-tests \
      --scan-class-path="$roots" "$@" ;;
  jmh)
    java "${jvm[@]}" -jar "$here/jmh/benchmarks.jar" "$@" ;;
  main)
    cls=$1; shift
    java "${jvm[@]}" -cp "$cp" "$cls" "$@" ;;
  *) echo "run.sh: tests | jmh | main CLASS" >&2; exit 2 ;;
esac
