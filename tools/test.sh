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

passed=0
failed=0
for t in $targets; do
  rel=${t#//}
  rel=${rel/://}
  xml="$testlogs/$rel/test.xml"
  header=$(grep -m1 -o '<testsuites[^>]*>' "$xml" 2>/dev/null || true)
  if [ -z "$header" ]; then
    echo "no results for $t"
    failed=$((failed + 1))
    continue
  fi
  attr() { echo "$header" | sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p"; }
  n=$(attr tests); f=$(attr failures); e=$(attr errors); d=$(attr disabled)
  n=${n:-0}; f=${f:-0}; e=${e:-0}; d=${d:-0}
  bad=$((f + e))
  # Bazel's own XML for a crashed or timed-out binary has no counts.
  if [ "$n" -eq 0 ]; then bad=1; fi
  ok=$((n - d - bad))
  [ "$ok" -lt 0 ] && ok=0
  passed=$((passed + ok))
  failed=$((failed + bad))
done
if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "bazel test exited $bazel_rc (build failure?)"
  failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
