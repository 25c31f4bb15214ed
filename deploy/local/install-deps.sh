#!/usr/bin/env bash
# Installs every Debian package that shardd's build, demo and tests need.
# Idempotent: packages already present are skipped, and apt-get runs only when
# something is missing. Run as root (or with sudo) on Debian 12.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libyaml-cpp-dev libgtest-dev libgmock-dev
  libgloo-dev libopenblas-dev libsqlite3-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libsentencepiece-dev libcpp-httplib-dev libicu-dev
  libssl-dev  # libcrypto: SHA-256 of worker tokens in the state database
  clang libclang-rt-14-dev  # libFuzzer (tests/fuzz/run_fuzzers.sh)
  python3
  iproute2  # ip netns + veth: the two-host end-to-end test (tests/e2e/netns)
  openssl  # the TLS end-to-end tests make their certificates with it
  slurm-wlm munge  # the Slurm launcher's tests start a real single-node cluster
  chromium  # the dashboard end-to-end test loads the page in headless Chromium
)
# The Kubernetes manifest validator runs on Node.js (these machines ship Node 20).
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
