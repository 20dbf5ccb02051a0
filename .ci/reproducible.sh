#!/usr/bin/env bash
# Reproducible builds: builds the library jars (kvpool-api, kvpool-transfer, kvpool-cuda, kvpool-micrometer,
# with their -tests jars) twice, each time from a fresh copy of the working tree in its own directory (so a
# build time, an absolute path or a file-system order that leaks into a jar shows up), and compares them byte
# for byte. Fails naming every jar that differs, with the entries that differ. Relies on
# project.build.outputTimestamp (root pom). Called by .ci/run after the tests; runs alone too:
#   .ci/reproducible.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
mods=kvpool-api,kvpool-transfer,kvpool-cuda,kvpool-micrometer
work=$(mktemp -d "${TMPDIR:-/tmp}/kvpool-repro.XXXXXX")
trap 'rm -rf "$work"' EXIT

for i in 1 2; do
  mkdir -p "$work/tree$i"
  # the working tree as git sees it (tracked and untracked-but-not-ignored files): no target/, no .gpu/
  git ls-files -z --cached --others --exclude-standard | (cd "$root" && tar --null -T - -cf -) | tar -C "$work/tree$i" -xf -
  echo ".ci/reproducible.sh: build $i of $mods"
  (cd "$work/tree$i" && ./dev mvn -q -DskipTests package -pl "$mods") \
    || { echo ".ci/reproducible.sh: build $i failed" >&2; exit 1; }
done

differ=0
count=0
while IFS= read -r jar; do
  count=$((count + 1))
  other=$work/tree2/$jar
  if [[ ! -f $other ]]; then
    echo ".ci/reproducible.sh: DIFFERS: $jar (missing from the second build)" >&2
    differ=$((differ + 1))
  elif ! cmp -s "$work/tree1/$jar" "$other"; then
    echo ".ci/reproducible.sh: DIFFERS: $jar" >&2
    # unzip -v lists each entry with its CRC, size and time: show the entries that differ
    diff <(unzip -v "$work/tree1/$jar" | sed '1,3d') <(unzip -v "$other" | sed '1,3d') | head -n 20 >&2 || true
    differ=$((differ + 1))
  fi
done < <(cd "$work/tree1" && ls kvpool-api/target/*.jar kvpool-transfer/target/*.jar kvpool-cuda/target/*.jar \
           kvpool-micrometer/target/*.jar 2>/dev/null)

if ((count == 0)); then
  echo ".ci/reproducible.sh: no jars were built" >&2
  exit 1
fi
if ((differ > 0)); then
  echo ".ci/reproducible.sh: FAILED: $differ of $count library jars differ between two builds of the same tree" >&2
  exit 1
fi
echo ".ci/reproducible.sh: OK: $count library jars byte-identical across two builds"
(cd "$work/tree1" && sha256sum kvpool-*/target/*.jar)
