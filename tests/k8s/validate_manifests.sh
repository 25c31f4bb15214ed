#!/usr/bin/env bash
# ctest k8s_manifest_schema: renders several job shapes with `shardctl render
# k8s` and the deploy/k8s kustomization, and validates every document against
# the Kubernetes OpenAPI schema, strictly (validate.mjs); then checks that the
# validator refuses the hand-written bad manifests in negative/.
# Exit 77 (ctest: skipped) only when Node.js/npm or the npm modules are
# missing; `npm ci --prefix tests/k8s` installs the modules.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
shardctl="${1:?usage: validate_manifests.sh PATH/TO/shardctl}"
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are not installed (apt-get install nodejs npm), so the schema validator cannot run"
  exit 77
fi
if [ ! -d "$here/node_modules/kubernetes-models" ]; then
  echo "tests/k8s/node_modules is missing: trying npm ci --prefix tests/k8s"
  npm ci --prefix "$here" --no-audit --no-fund > /dev/null 2>&1 || true
fi
if [ ! -d "$here/node_modules/kubernetes-models" ] || [ ! -d "$here/node_modules/yaml" ]; then
  echo "SKIP: the npm modules are not installed and npm ci failed (no registry?); run: npm ci --prefix tests/k8s"
  exit 77
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fail=0
render() {  # NAME ARGS...
  local name="$1"
  shift
  if ! "$shardctl" render k8s "$@" > "$out/$name.yaml" 2> "$out/$name.err"; then
    echo "FAIL: shardctl render k8s $*: $(cat "$out/$name.err")"
    fail=1
  fi
}
render cpu-1x2 "$here/jobs/cpu-1x2.yaml" --workdir /shardd/jobs/cpu
render cpu-2x1 "$here/jobs/cpu-2x1.yaml" --workdir /shardd/jobs/cpu --attempt 3
render gpu-2x8 "$here/jobs/gpu-2x8.yaml" --workdir /shardd/jobs/llama --pod-coordinator shardd.ml.svc.cluster.local:7070
render extras "$here/jobs/extras.yaml" --workdir /mnt/shared/team-a/run1
render deadline "$here/jobs/deadline.yaml" --workdir /shardd --job-id "a-very-long-job-name-that-will-not-fit-into-a-dns-label-42" --attempt 12
render overrides "$here/jobs/cpu-1x2.yaml" --workdir /shardd/x --set resources.kubernetes.nodes=2 \
  --set parallel.world_size=4 --set resources.kubernetes.memory=512Mi --set resources.kubernetes.image_pull_policy=Never
docs=("$out"/*.yaml)
# deploy/k8s: kustomize's output where kubectl has kustomize built in, and the
# base's files one by one in any case.
if command -v kubectl > /dev/null && kubectl kustomize "$root/deploy/k8s" > "$out/deploy-kustomized.yaml" 2> "$out/kustomize.err"; then
  echo "deploy/k8s: kubectl kustomize rendered $(grep -c '^kind:' "$out/deploy-kustomized.yaml") object(s)"
  docs+=("$out/deploy-kustomized.yaml")
else
  echo "deploy/k8s: kubectl kustomize unavailable ($(cat "$out/kustomize.err" 2>/dev/null | head -1)); validating the files one by one"
fi
for f in "$root"/deploy/k8s/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] && continue
  docs+=("$f")
done
if ! node "$here/validate.mjs" "${docs[@]}"; then fail=1; fi
echo "negative cases (each document must be refused):"
if ! node "$here/validate.mjs" --expect-invalid "$here"/negative/*.yaml; then fail=1; fi
# The token never leaves the coordinator in printed manifests.
if grep -h "token:" "$out"/*.yaml | grep -v REDACTED; then
  echo "FAIL: a rendered Secret carries something other than the placeholder"
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  echo "FAILED"
  exit 1
fi
echo "all manifests valid; all negative cases refused"
