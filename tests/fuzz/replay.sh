#!/usr/bin/env bash
# Runs a libFuzzer binary once over every file of the given folders (missing
# folders are skipped): the CI replay of tests/fuzz/regressions/<target> and
# tests/fuzz/corpus/<target>. Fails on the first crash, sanitizer report,
# timeout (-timeout, seconds per input) or memory blow-up (-rss_limit_mb).
# Usage: replay.sh FUZZER DIR...
set -euo pipefail
fuzzer=$1
shift
files=()
for d in "$@"; do
  [[ -d $d ]] || continue
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$d" -type f ! -name '.*' -print0 | sort -z)
done
if ((${#files[@]} == 0)); then
  echo "replay.sh: no inputs for $(basename "$fuzzer") in $*" >&2
  exit 1
fi
echo "replay.sh: $(basename "$fuzzer"): ${#files[@]} inputs"
# Files as arguments: libFuzzer runs each once and exits non-zero on a finding.
# Batches keep the command line short.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((i = 0; i < ${#files[@]}; i += 200)); do
  rc=0
  "$fuzzer" -rss_limit_mb=2048 -timeout=60 "${files[@]:i:200}" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    grep -v '^Running: \|^Executed ' "$log" | tail -n 60 >&2
    echo "replay.sh: $(basename "$fuzzer") failed (exit $rc) on an input of the batch above" >&2
    exit "$rc"
  fi
done
echo "replay.sh: $(basename "$fuzzer"): all ${#files[@]} inputs passed"
