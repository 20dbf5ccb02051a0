#!/usr/bin/env bash
# Packs the project into .gpu/ (at the repository root) for a run on the GPU machine, which has no Java and no
# network: a trimmed Java 25 runtime, every module's classes and test classes, all their dependencies (test
# scope), the JUnit console launcher matching the project's JUnit Platform, the JMH uber-jar
# (jmh/target/benchmarks.jar), and run.sh (beside this file). kvpool-cuda/pack-gpu.sh calls it and then drops
# the jars no GPU run needs; use that one. Works from a normal checkout and from a git worktree.
#
# Needs: Maven and a JDK 25 (found by ./dev), network for the JUnit console launcher the first time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
jdk=$(./dev mvn -v 2>/dev/null | sed -n 's/^Java version: .*, runtime: //p' | head -n 1)
[[ -x $jdk/bin/jlink ]] || { echo "pack.sh: no JDK 25 with jlink found through ./dev (set JAVA_HOME)" >&2; exit 1; }

out=.gpu
rm -rf "$out/lib" "$out/mods" "$out/jmh"
mkdir -p "$out/lib" "$out/mods"
# keep .gpu/ out of git; in a worktree .git is a file, so ask git where info/exclude lives
exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || true)
if [[ -n $exclude ]]; then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
fi

./dev mvn -q -DskipTests package dependency:copy-dependencies \
  -DincludeScope=test -DoutputDirectory="$root/$out/lib" -Dmdep.overWriteIfNewer=true

# each module's classes and test classes, under its directory name (kvpool-api, ..., jmh, examples)
for t in $(find . -path ./.gpu -prune -o -type d -name target -print); do
  m=$(basename "$(dirname "$t")")
  [[ -d $t/classes || -d $t/test-classes ]] || continue
  mkdir -p "$out/mods/$m"
  [[ -d $t/classes ]] && cp -r "$t/classes" "$out/mods/$m/"
  [[ -d $t/test-classes ]] && cp -r "$t/test-classes" "$out/mods/$m/"
done
# the benchmarks' uber-jar (kvpool-benchmarks, shaded as jmh/target/benchmarks.jar)
if [[ -f jmh/target/benchmarks.jar ]]; then
  mkdir -p "$out/jmh"
  cp jmh/target/benchmarks.jar "$out/jmh/benchmarks.jar"
fi

# JCuda's natives jar carries a 24 MB PTX compiler and an NVRTC binding for CUDA 12 that the GPU machine
# (CUDA 13) cannot load anyway: keep the driver and runtime bindings only.
for j in "$out"/lib/jcuda-natives-*.jar; do
  [[ -f $j ]] || continue
  tmp=$(mktemp -d)
  (cd "$tmp" && "$jdk/bin/jar" xf "$root/$j" && rm -f lib/libJNvPTXCompiler* lib/libJNvrtc* && "$jdk/bin/jar" cf "$root/$j.slim" lib)
  mv "$j.slim" "$j"
  rm -rf "$tmp"
done

# the JUnit console launcher that matches the project's JUnit Platform (it carries the platform and Jupiter)
pv=$(ls "$out"/lib/junit-platform-commons-*.jar 2>/dev/null | sed -n 's/.*junit-platform-commons-\(.*\)\.jar/\1/p' | head -n 1)
if [[ -n $pv ]]; then
  ./dev mvn -q dependency:copy -Dartifact="org.junit.platform:junit-platform-console-standalone:$pv" \
    -DoutputDirectory="$root/$out" -Dmdep.stripVersion=true
  mv "$out/junit-platform-console-standalone.jar" "$out/junit-console.jar"
  rm -f "$out"/lib/junit-platform-* "$out"/lib/junit-jupiter-* "$out"/lib/opentest4j-* "$out"/lib/apiguardian-*
fi

# a trimmed Java 25 runtime, built once per machine
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kvpool-gpu
jre_id=$(basename "$(readlink -f "$jdk")")
if [[ ! -f $cache/jre.tar.xz || $(cat "$cache/jre.id" 2>/dev/null) != "$jre_id" ]]; then
  mkdir -p "$cache"
  rm -rf "$cache/jre"
  "$jdk/bin/jlink" --add-modules java.base,java.logging,java.management,jdk.management,jdk.unsupported,java.xml,jdk.httpserver,java.net.http,jdk.crypto.ec \
    --strip-debug --no-header-files --no-man-pages --compress=zip-9 --output "$cache/jre"
  tar -C "$cache" -cJf "$cache/jre.tar.xz" jre
  rm -rf "$cache/jre"
  echo "$jre_id" > "$cache/jre.id"
fi
cp "$cache/jre.tar.xz" "$out/jre.tar.xz"
cp "$here/run.sh" "$out/run.sh"
chmod +x "$out/run.sh"

size=$(du -sm "$out" | cut -f1)
echo "pack.sh: $out holds ${size} MiB"
