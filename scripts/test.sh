#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run the whole suite.
#
#   bash scripts/test.sh [pytest args...]
#
# As root it installs the Debian packages the multi-node test bed and the browser tests use
# (iperf3, openssh-server, iproute2, chromium), prometheus (the server and promtool: the alerting
# tests start their own server on loopback; the package's service plays no part), and slurm-wlm
# and munge for the Slurm test bed, gcc and libcjson-dev to build the stand-in NVML library
# (tests/nvml/standin); and, through scripts/k8s/build-apiserver.sh, etcd and a
# kube-apiserver for the Kubernetes tests. It makes a virtual environment (.venv-test, or
# $PREFLIGHT_VENV) with preflight, its test extras, the example plugin, and pinned CPU builds of
# the frameworks preflight tests (override with TORCH_SPEC / TENSORFLOW_SPEC).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PREFLIGHT_VENV:-.venv-test}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TENSORFLOW_SPEC="${TENSORFLOW_SPEC:-tensorflow-cpu==2.21.0}"
# A second environment with another torch: one test-bed node runs it, and versions.consistency must
# name that node. 2.14.1 is a CUDA build (about 5 GB) that runs on the CPU too.
DRIFT_VENV="${PREFLIGHT_DRIFT_VENV:-.venv-test-drift}"
TORCH_DRIFT_SPEC="${TORCH_DRIFT_SPEC:-torch==2.14.1}"
APT_PACKAGES=(iperf3 openssh-server openssh-client iproute2 procps chromium prometheus slurm-wlm munge postgresql
              gcc libc6-dev libcjson-dev)

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=()
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip uninstall -q -y preflight >/dev/null 2>&1 || true  # renamed preflight-cluster
"$VENV/bin/python" -m pip install -q "$TORCH_SPEC" "$TENSORFLOW_SPEC" -e '.[test]'
"$VENV/bin/python" -m pip install -q --no-deps -e tests/plugins/preflight-example

if [ ! -x "$DRIFT_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$DRIFT_VENV"
fi
"$DRIFT_VENV/bin/python" -m pip install -q "$TORCH_DRIFT_SPEC" -e .
export PREFLIGHT_DRIFT_PYTHON="$PWD/$DRIFT_VENV/bin/python"

# The Kubernetes tests run against a real kube-apiserver built from Debian's kubernetes source
# package (about 17 minutes the first time on 2 cores; cached outside the repository by version).
if [ -z "${PREFLIGHT_KUBE_APISERVER:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    PREFLIGHT_KUBE_APISERVER="$(bash scripts/k8s/build-apiserver.sh)"
    export PREFLIGHT_KUBE_APISERVER
fi

exec "$VENV/bin/python" -m pytest -rs "$@"
