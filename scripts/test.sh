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

# The wall time of each phase, printed as it ends: "phase NAME" ends the phase before and starts NAME.
PHASE_NAME="" PHASE_START=$SECONDS
phase() {
    [ -z "$PHASE_NAME" ] || echo "=== phase $PHASE_NAME: $((SECONDS - PHASE_START)) s"
    PHASE_NAME="$1" PHASE_START=$SECONDS
}

VENV="${PREFLIGHT_VENV:-.venv-test}"
PYTHON="${PYTHON:-python3}"
# The CPU build of torch (+cpu): where the default index serves only the CUDA build (several GB), point
# pip at PyTorch's CPU index with PIP_EXTRA_INDEX_URL (pytorch.org's install selector names it); a
# machine with the +cpu wheel on disk or in its index needs nothing.
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0+cpu}"
TENSORFLOW_SPEC="${TENSORFLOW_SPEC:-tensorflow-cpu==2.21.0}"
# Keras 2 for tf.distribute.MultiWorkerMirroredStrategy in model.fit (checkpoint.cluster_resume): the Keras 3 of
# TensorFlow 2.16+ does not run model.fit under it.
TF_KERAS_SPEC="${TF_KERAS_SPEC:-tf-keras==2.21.0}"
# A second environment whose stack differs from the first in one package: one test-bed node runs it, and
# versions.consistency must name that node. The same torch as .venv-test (a CPU build, about 200 MB) and an
# older numpy: a real install that differs where the check compares, without a second torch build to fetch.
DRIFT_VENV="${PREFLIGHT_DRIFT_VENV:-.venv-test-drift}"
DRIFT_SPEC="${DRIFT_SPEC:-$TORCH_SPEC numpy==2.2.6}"
APT_PACKAGES=(iperf3 openssh-server openssh-client iproute2 procps chromium prometheus slurm-wlm munge postgresql
              gcc libc6-dev libcjson-dev)

phase apt
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

phase venv
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip uninstall -q -y preflight >/dev/null 2>&1 || true  # renamed preflight-cluster
if ! "$VENV/bin/python" -m pip install -q "$TORCH_SPEC" "$TENSORFLOW_SPEC" "$TF_KERAS_SPEC" -e '.[test]'; then
    echo "scripts/test.sh: could not install $TORCH_SPEC $TENSORFLOW_SPEC $TF_KERAS_SPEC: for torch's CPU build," \
         "set PIP_EXTRA_INDEX_URL to PyTorch's CPU index, or choose another with TORCH_SPEC" >&2
    exit 1
fi
"$VENV/bin/python" -m pip install -q --no-deps -e tests/plugins/preflight-example

# The two slow parts of a fresh machine's set-up run in the background while the tests run: the
# second torch (a download of several GB) and the kube-apiserver, built from Debian's kubernetes
# source package (about 17 minutes the first time on 2 cores; cached outside the repository by
# version). The tests that need them run last and wait for them (tests/setup_state.py); each job
# writes NAME.out, NAME.log and, when it ends, NAME.done with its exit status.
SETUP_DIR="$(mktemp -d "${TMPDIR:-/tmp}/preflight-test-setup.XXXXXX")"
export PREFLIGHT_TEST_SETUP_DIR="$SETUP_DIR"
background() {  # background NAME SCRIPT: a bash script in a session of its own, at the lowest CPU priority
    local name="$1"
    touch "$SETUP_DIR/$name.started"
    (
        start=$SECONDS
        setsid nice -n 19 bash -c "set -euo pipefail; $2" >"$SETUP_DIR/$name.out" 2>"$SETUP_DIR/$name.log" \
            </dev/null && echo 0 >"$SETUP_DIR/$name.done" || echo $? >"$SETUP_DIR/$name.done"
        echo "$((SECONDS - start))" >"$SETUP_DIR/$name.seconds"
    ) &
    BACKGROUND_JOBS+=("$name")
}
BACKGROUND_JOBS=()
cleanup() {  # a job the tests did not wait for (a partial run) is ended with its whole session
    local name pid
    for name in "${BACKGROUND_JOBS[@]}"; do
        [ -f "$SETUP_DIR/$name.done" ] && continue
        for pid in $(pgrep -f "^bash -c set -euo pipefail; # preflight-setup $name" || true); do
            kill -- "-$pid" 2>/dev/null || true
        done
    done
    rm -rf "$SETUP_DIR"
}
trap cleanup EXIT

phase "background jobs"
export PREFLIGHT_DRIFT_PYTHON="$PWD/$DRIFT_VENV/bin/python"
if [ -x "$DRIFT_VENV/bin/python" ] && [ "$(cat "$DRIFT_VENV/drift-spec" 2>/dev/null)" = "$DRIFT_SPEC" ]; then
    "$DRIFT_VENV/bin/python" -m pip install -q --no-deps -e . >/dev/null
else  # made afresh when its packages were another's (an older set-up's)
    background drift "# preflight-setup drift
        rm -rf '$DRIFT_VENV'
        '$PYTHON' -m venv '$DRIFT_VENV'
        '$DRIFT_VENV/bin/python' -m pip install -q $DRIFT_SPEC -e .
        echo '$DRIFT_SPEC' >'$DRIFT_VENV/drift-spec'"
fi

if [ -z "${PREFLIGHT_KUBE_APISERVER:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    background apiserver "# preflight-setup apiserver
        bash scripts/k8s/build-apiserver.sh"
fi

# Not exec: the trap above ends the background jobs and removes their state when the tests end.
background_times() {  # how long each background job took, or that it is still going
    local name
    for name in "${BACKGROUND_JOBS[@]}"; do
        echo "=== background $name: $(cat "$SETUP_DIR/$name.seconds" 2>/dev/null || echo "still running, not waited for") s"
    done
}
phase tests
if [ "$#" -gt 0 ]; then
    set +e
    "$VENV/bin/python" -m pytest -rs "$@"
    status=$?
    phase ""
    background_times
    exit "$status"
fi
# The whole suite, in three lanes side by side: the unit tests (pure functions and single processes, no test
# bed) and after them the Slurm beds; the multi-node namespace tests (tests/cluster) and after them the
# Kubernetes beds; and the single-node integration tests. The bed tests spend most of their time waiting on
# links, daemons, pods and timeouts, so they share the two cores well; each bed takes its own addresses,
# namespaces and ports (testbed.py, slurmbed.py, k8s/bed.py). The Kubernetes tests start about half an hour
# in, so the apiserver built in the background has time to be ready. Each pytest run's summary, with its
# slowest tests and its wall time, is printed; the suite fails when any run does.
beside() {  # beside NAME COMMAND...: a lane in the background, its output in $SETUP_DIR/NAME.log
    local name="$1"
    shift
    (
        start=$SECONDS status=0
        "$@" >"$SETUP_DIR/$name.log" 2>&1 || status=$?
        echo "=== phase $name (beside the others): $((SECONDS - start)) s" >>"$SETUP_DIR/$name.log"
        exit "$status"
    ) &
}
PYTEST=("$VENV/bin/python" -m pytest -rs -p no:cacheprovider --durations=25)
in_turn() {  # in_turn NICENESS FIRST SECOND: two pytest runs one after the other; both run, the lane fails when either does
    local first=0 second=0 start=$SECONDS
    nice -n "$1" "${PYTEST[@]}" "$2" || first=$?
    echo "=== phase $2: $((SECONDS - start)) s"
    start=$SECONDS
    "${PYTEST[@]}" "$3" || second=$?
    echo "=== phase $3: $((SECONDS - start)) s"
    [ "$first" -eq 0 ] || return "$first"
    return "$second"
}
beside unit-then-slurm in_turn 10 tests/unit tests/slurm
unit_pid=$!
beside cluster-then-k8s in_turn 0 tests/cluster tests/k8s
cluster_pid=$!
set +e
"${PYTEST[@]}" --ignore=tests/unit --ignore=tests/cluster --ignore=tests/slurm --ignore=tests/k8s
others=$?
phase "the rest, after the others"
wait "$cluster_pid"
cluster=$?
wait "$unit_pid"
unit=$?
phase ""
set -e
for name in cluster-then-k8s unit-then-slurm; do
    echo
    echo "=== lane $name, run beside the others (exit $([ "$name" = cluster-then-k8s ] && echo "$cluster" || echo "$unit")) ==="
    cat "$SETUP_DIR/$name.log"
done
background_times
echo "=== in all: $SECONDS s"
for status in "$others" "$cluster" "$unit"; do
    [ "$status" -eq 0 ] || exit "$status"
done
