"""Every finding a built-in check can report has a fix of its own, declared by its kind.

A check declares `fixes` (finding kind -> fix); `Check.finding()` attaches the fix by kind, so
reordering hints can never attach the wrong one. Here every declared kind is walked: its fix is
there, and no two kinds of a check share one unless their cause is the same (listed below, with
why). The kinds written literally in a check's evaluate() must be declared, or be said on purpose
to have nothing to fix (a PASS, a SKIP that does not apply to a node of this shape).
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections import defaultdict

import pytest

from preflight.core.model import CAVEAT

from preflight.core.check import TOO_FEW_NODES_FIXES
from preflight.core.registry import discover
from tests.conftest import built_in_checks

REGISTRY = discover()
BUILT_IN = sorted(built_in_checks(REGISTRY.checks))

# Kinds that share one fix because they share one cause; anything else must have a fix of its own.
SAME_CAUSE = {
    "checkpoint.roundtrip": [
        ({"storage-other", "not-exact", "tensorflow-failed", "tensorflow-not-exact", "tensorflow-stale-latest"},
         "the checkpoint filesystem itself: point checkpoint.dir at a working one"),
        ({"resume-no-checkpoint", "resume-not-exact"}, "a checkpoint that does not hold the whole training state"),
    ],
    "collectives.cluster": [
        ({"probe-failed", "launch"}, "a node that could not take part in the launch"),
        ({"collective", "timeout", "stopped", "slow-busbw", "slow-latency", "pairwise-node", "pairwise-pair",
          "pairwise-all-bad", "pairwise-all-good", "pairwise-none", "isolated-node"},
         "a slow or failing link or node, which the pairwise or adaptive pass names"),
    ],
    "collectives.local": [
        ({"wrong-sums", "nccl-tests-wrong"}, "wrong sums, whichever program found them"),
        ({"latency", "slow-busbw"}, "the node's interconnect (gloo's own fix is given where gloo ran)"),
    ],
    "dataloader.throughput": [({"below-demand", "below-margin"}, "the same slow loader, by how much")],
    "gpu.visibility": [
        ({"framework-count", "not-all-computed"}, "a framework that does not see every GPU"),
        ({"count", "gpu-unreadable"}, "a GPU missing from or dead on the bus"),
        ({"memory-in-use", "processes"}, "processes holding the GPUs"),
        ({"ecc-uncorrectable", "remap-failed"}, "failing GPU memory"),
        ({"remap-pending", "pages-pending"}, "a memory repair that waits for a reset"),
        ({"throttled", "at-slowdown", "hot-idle"}, "cooling or power"),
        ({"pcie-degraded", "nvlink-down", "copy-untimed", "copy-slow"}, "the GPU's links"),
        ({"product-failed", "product-wrong"}, "a GPU that does not compute right"),
    ],
    "scaling.multi_node": [
        ({"probe-failed", "cannot-take-part", "launch", "rendezvous", "roll-call", "stopped"},
         "a node that could not join the job"),
        ({"collective", "timeout"}, "the network between the nodes"),
    ],
    "versions.consistency": [
        ({"python-differs", "torch-differs", "torch-cuda-differs", "cudnn-differs", "nccl-differs",
          "tensorflow-differs", "jax-differs", "numpy-differs"}, "the Python stack of one image or lock file"),
    ],
    "versions.pinned": [
        ({"framework-mismatch", "package-mismatch", "framework-not-installed", "package-not-installed"},
         "an environment not built from the pinned files"),
    ],
}
# Kinds written in a check's code that have nothing to fix, on purpose.
NOTHING_TO_FIX = {
    "canary.training": {"no-gpu"},  # PASS: the GPU figures are not measured on a CPU node
    # PASS: information beside a framework that sees every GPU, or what could not be compared without one
    "gpu.visibility": {"cpu-only-framework", "not-compared"},
    "scaling.multi_gpu": {"efficiency", "single-device.not-applicable", "cpu-only.not-applicable"},
    "kubernetes.gpus": {"not-applicable"},  # SKIP: no node of the run came from the Kubernetes API
    "job.plan": {"predicted", "micro-batch-fits"},  # PASS: the prediction, and a micro-batch that fits
}
# Helper modules whose findings a check states (besides its own module).
HELPERS = {"gpu.visibility": ["preflight_checks.gpu.judging"],
           "collectives.cluster": ["preflight_checks.collectives.figures"],
           "job.plan": ["preflight_checks.job.figures"]}
LITERAL_KIND = re.compile(r'(?:\.finding|found|\.add)\(\s*"([a-z0-9.-]+)"\s*,')


def test_the_built_in_checks_are_found():
    assert len(BUILT_IN) >= 14 and {"node.environment", "net.bandwidth", "collectives.cluster"} <= set(BUILT_IN)


@pytest.mark.parametrize("check_id", BUILT_IN)
def test_every_finding_kind_has_a_fix_of_its_own(check_id):
    check = REGISTRY.checks[check_id]
    assert check.fixes, f"{check_id} declares no fixes"
    by_fix = defaultdict(set)
    for kind, fix in check.fixes.items():
        # A kind, or a kind of caveat (a PASS finding that qualifies the figures: core.model.CAVEAT).
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*(" + re.escape(CAVEAT) + ")?", kind), \
            f"{check_id}.{kind} is not a finding kind"
        assert isinstance(fix, str) and len(fix.strip()) >= 20, f"{check_id}.{kind} has no real fix"
        by_fix[fix].add(kind)
    shared = [kinds for kinds in by_fix.values() if len(kinds) > 1]
    justified = [kinds for kinds, _ in SAME_CAUSE.get(check_id, [])]
    for kinds in shared:
        assert any(kinds <= allowed for allowed in justified), f"{check_id}: {sorted(kinds)} share one fix"
    for kinds in justified:
        assert kinds <= set(check.fixes), f"{check_id}: the justification names kinds it does not declare"
        assert len({check.fixes[k] for k in kinds}) <= len(kinds) - 1, f"{check_id}: {sorted(kinds)} no longer share"


@pytest.mark.parametrize("check_id", BUILT_IN)
def test_every_kind_the_code_states_is_declared(check_id):
    check = REGISTRY.checks[check_id]
    modules = [sys.modules[check.__module__]] + [importlib.import_module(m) for m in HELPERS.get(check_id, [])]
    stated = {kind for module in modules for kind in LITERAL_KIND.findall(inspect.getsource(module))}
    assert stated, f"{check_id} states no finding through Check.finding()"
    undeclared = stated - set(check.fixes) - NOTHING_TO_FIX.get(check_id, set())
    assert undeclared == set()


@pytest.mark.parametrize("check_id", BUILT_IN)
def test_every_finding_id_is_the_check_id_and_its_kind(check_id):
    from preflight.core.model import Status

    check = REGISTRY.checks[check_id]
    for kind, fix in check.fixes.items():
        finding = check.finding(kind, Status.FAIL, "a sentence")
        assert (finding.id, finding.fix) == (f"{check_id}.{kind}", fix)


def test_cross_node_checks_declare_what_too_few_nodes_reports():
    for check_id in ("net.bandwidth", "collectives.cluster", "storage.shared", "scaling.multi_node"):
        assert set(TOO_FEW_NODES_FIXES) <= set(REGISTRY.checks[check_id].fixes), check_id


def test_no_check_reads_its_fixes_by_position():
    for check_id in BUILT_IN:
        source = inspect.getsource(sys.modules[REGISTRY.checks[check_id].__module__])
        assert not re.search(r"remediation\s*\[|=\s*self\.remediation\b|zip\([^)]*remediation", source), check_id
