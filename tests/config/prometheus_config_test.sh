#!/usr/bin/env bash
# promtool on everything deploy/prometheus ships: the local config, the
# Kubernetes config, the alert rules, and the alert rules' unit tests (one
# firing and one quiet case per alert, in alerts_test.yml).
set -euo pipefail
promtool=/usr/bin/promtool
[ -x "$promtool" ] || { echo "promtool missing: run tools/setup.sh"; exit 1; }
src="${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/prometheus"
work="${TEST_TMPDIR}/prometheus"
mkdir -p "$work"
cp "$src"/*.yml "$work/"
echo "[]" > "$work/targets.json"
cd "$work"

"$promtool" check config prometheus.yml
# Debian's Prometheus is built without Kubernetes service discovery, so check
# everything else in the Kubernetes config (relabelling, rule files) with the
# discovery block swapped for a static target.
sed 's/kubernetes_sd_configs:/static_configs:/; s/      - role: pod/      - targets: ["pod:9464"]/' \
  prometheus-k8s.yml > k8s-checkable.yml
grep -q "kubernetes_sd_configs" prometheus-k8s.yml
"$promtool" check config k8s-checkable.yml
"$promtool" check rules alerts.yml
"$promtool" test rules alerts_test.yml
# Every alert in alerts.yml has a unit test.
for alert in $(sed -n 's/^ *- alert: *//p' alerts.yml); do
  grep -q "alertname: $alert\$" alerts_test.yml || { echo "no test for alert $alert"; exit 1; }
done
echo "all prometheus checks passed"
