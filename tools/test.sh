#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test.
# Ends with one line "N passed, N failed" counted from the test cases in
# Bazel's per-target XML results (a target that crashed or timed out
# without reporting its cases counts as one failure).
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

bazel test --noshow_progress //... "$@"
bazel_rc=$?

testlogs=$(bazel info bazel-testlogs 2>/dev/null)
targets=$(bazel query 'tests(//...)' 2>/dev/null)
bazel shutdown >/dev/null 2>&1

passed=0 skipped=0
failed=0
for t in $targets; do
  rel=${t#//}
  rel=${rel/://}
  xml="$testlogs/$rel/test.xml"
  # Sum over every <testsuite> element: GoogleTest writes one per suite,
  # Bazel writes one for tests that are not GoogleTest (sh_test) or that
  # crashed or timed out before reporting.
  counts=$(grep -o '<testsuite [^>]*>' "$xml" 2>/dev/null | awk '
    function attr(s, name,   m) { return match(s, " " name "=\"[0-9]+\"") ? substr(s, RSTART + length(name) + 3, RLENGTH - length(name) - 4) + 0 : 0 }
    { n += attr($0, "tests"); f += attr($0, "failures") + attr($0, "errors"); d += attr($0, "disabled"); s += attr($0, "skipped") }
    END { if (NR == 0) print "none"; else print n, f, d, s }')
  if [ -z "$counts" ] || [ "$counts" = "none" ]; then
    echo "no results for $t"
    failed=$((failed + 1))
    continue
  fi
  read -r n bad d s <<< "$counts"
  [ "$n" -eq 0 ] && bad=1
  skipped=$((skipped + s))
  ok=$((n - d - s - bad))
  [ "$ok" -lt 0 ] && ok=0
  passed=$((passed + ok))
  failed=$((failed + bad))
done
if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "bazel test exited $bazel_rc (build failure?)"
  failed=1
fi
# Skipped tests (GPU tests on a machine without a GPU) are neither.
[ "$skipped" -gt 0 ] && echo "$skipped skipped (they say why in their logs, e.g. no CUDA device)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
