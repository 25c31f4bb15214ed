#!/usr/bin/env bash
# Records tests/k8s/fixtures/<scenario>_<step>.json: what the real kubectl
# prints for the launcher's watch command (`kubectl get jobs.batch,pods -l
# <attempt> -o json`) at each step of each scenario, served by the stand-in
# API server (fake_apiserver.py). The status parser's unit tests read these
# files, so they run without kubectl. Rerun after changing a scenario:
#   bash tests/k8s/record_fixtures.sh build/coordinator/ctl/shardctl
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shardctl="${1:?usage: record_fixtures.sh PATH/TO/shardctl}"
tmp="$(mktemp -d)"
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
mkdir -p "$here/fixtures"
"$shardctl" render k8s "$here/jobs/cpu-2x1.yaml" --job-id demo-1 --attempt 1 --workdir /shardd/jobs/demo \
  | grep -v '^#' > "$tmp/objects.yaml"
for scenario in "$here"/scenarios/*.json; do
  name="$(basename "$scenario" .json)"
  steps="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$scenario")"
  [ "$steps" -gt 0 ] || continue  # scenarios about applies (apply_invalid) have nothing to record
  rm -f "$tmp/port"
  python3 "$here/fake_apiserver.py" --port-file "$tmp/port" --log "$tmp/log" --scenario "$scenario" &
  server=$!
  for _ in $(seq 50); do [ -f "$tmp/port" ] && break; sleep 0.1; done
  cat > "$tmp/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "http://127.0.0.1:$(cat "$tmp/port")"}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
KC
  kubectl --kubeconfig "$tmp/kubeconfig" apply --server-side --field-manager=shardd -f - < "$tmp/objects.yaml" > /dev/null
  for ((i = 0; i < steps; i++)); do
    kubectl --kubeconfig "$tmp/kubeconfig" get jobs.batch,pods -n default \
      -l shardd.io/job=demo-1,shardd.io/attempt=1 -o json > "$here/fixtures/${name}_$i.json"
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  echo "recorded $name: $steps step(s)"
done
