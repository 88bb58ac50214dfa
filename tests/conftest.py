"""Shared fixtures: recorded facts, sample reports, and a way to run the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from preflight.core.model import CheckResult, Measurement, RunReport, Scope, Status

# The fuzz tests draw the same examples on every run (a test that fails once must fail every time, and a
# suite that passes must not fail on the next draw); HYPOTHESIS_PROFILE=explore draws new ones.
try:
    from hypothesis import settings as _hypothesis

    _hypothesis.register_profile("preflight", derandomize=True, database=None)
    _hypothesis.register_profile("explore", derandomize=False)
    _hypothesis.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "preflight"))
except ImportError:  # the fuzz tests skip without hypothesis
    pass

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"


def load_facts(relative: str) -> dict:
    return json.loads((DATA / relative).read_text())


def built_in_checks(checks: dict) -> dict:
    """The checks of this checkout's checks/ among `checks` (not a plugin's, nor another installed copy's)."""
    here = (ROOT / "checks").resolve()
    return {cid: check for cid, check in checks.items()
            if Path(sys.modules[check.__module__].__file__).resolve().is_relative_to(here)}


def finding_ids(outcome, *levels: Status) -> list[str]:
    """The ids of an Outcome's (or a CheckResult's) findings that fired (worse than PASS), or of those at
    `levels`: what tests assert on, so that rewording a sentence breaks none."""
    wanted = set(levels) or {Status.WARN, Status.FAIL, Status.ERROR, Status.SKIP}
    return [f.id for f in outcome.findings if f.level in wanted]


def make_result(check_id: str = "node.environment", node: str = "node1", status: Status = Status.PASS,
                summary: str = "fine", **kwargs) -> CheckResult:
    return CheckResult(check_id=check_id, node=node, status=status, summary=summary,
                       title=kwargs.pop("title", check_id), **kwargs)


def make_report(results: list[CheckResult], nodes: list[str] | None = None, **kwargs) -> RunReport:
    from preflight.core.model import NodeInfo

    node_names = nodes if nodes is not None else sorted({r.node for r in results if r.scope is Scope.NODE})
    planned = list(dict.fromkeys(r.check_id for r in results))
    cluster = list(dict.fromkeys(r.check_id for r in results if r.scope is Scope.CLUSTER))
    return RunReport(started_at="2026-11-29T10:00:00+00:00", finished_at="2026-11-29T10:03:05+00:00",
                     preflight_version="0.1.0", nodes=[NodeInfo(name=n) for n in node_names],
                     planned=kwargs.pop("planned", planned), cluster_checks=kwargs.pop("cluster_checks", cluster), results=results, **kwargs)


@pytest.fixture
def sample_report() -> RunReport:
    """A two-node run with every status, a cluster check, measurements and evidence."""
    return make_report([
        make_result("node.environment", "gpu01", Status.PASS, "shm 64 GiB, memlock unlimited",
                    measurements=[Measurement("/dev/shm size", 64.0, "GiB", 1.0, ">=", True)]),
        make_result("node.environment", "gpu02", Status.WARN, "open-files limit is 1024, below 65536",
                    measurements=[Measurement("open-files limit (soft)", 1024, "", 65536, ">=", False)],
                    remediation=["Raise nofile in /etc/security/limits.conf."]),
        make_result("gpu.visibility", "gpu01", Status.PASS, "8 x NVIDIA H100 80GB HBM3 visible and computing"),
        make_result("gpu.visibility", "gpu02", Status.FAIL, "7 GPUs visible, 8 expected",
                    measurements=[Measurement("GPUs visible (NVML)", 7, "", 8, "==", False)],
                    remediation=["Reseat or replace the missing GPU; check `nvidia-smi -q` for Xid errors."],
                    evidence=[]),
        make_result("checkpoint.roundtrip", "gpu01", Status.SKIP, "torch is not installed"),
        make_result("checkpoint.roundtrip", "gpu02", Status.ERROR, "timed out after 600s; the check was killed"),
        make_result("net.bandwidth", "cluster", Status.FAIL, "gpu01 -> gpu02 carries 4.2 Gbps, below 10 Gbps",
                    scope=Scope.CLUSTER,
                    measurements=[Measurement("bandwidth", 4.2, "Gbps", 10, ">=", False, [4.1, 4.2, 4.3],
                                              "gpu01 -> gpu02", figure="link", at="gpu01 -> gpu02")]),
    ], nodes=["gpu01", "gpu02"])


def preflight_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "preflight", *args]


def run_preflight(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "CI": "1", **(env or {})}
    full_env.pop("GITHUB_STEP_SUMMARY", None) if "GITHUB_STEP_SUMMARY" not in (env or {}) else None
    return subprocess.run(preflight_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def pids_alive(pids: list[int]) -> list[int]:
    import psutil

    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


# In CI (PREFLIGHT_REQUIRE_ALL_TESTS=1) a skipped test is a failed test: the multi-node test bed,
# the frameworks and the browser must all be there. Only tests whose need depends on the machine
# may skip: `gpu` (needs an NVIDIA GPU) and `nogpu` (asserts what happens without a driver).
# Skips at collection (a module-level pytest.importorskip) count too: a module of tests that never
# ran is as missing as one test.
REQUIRE_ALL = "PREFLIGHT_REQUIRE_ALL_TESTS"
MACHINE_MARKERS = ("gpu", "nogpu")


def _may_skip(node) -> bool:
    return any(node.get_closest_marker(name) is not None for name in MACHINE_MARKERS)


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and os.environ.get(REQUIRE_ALL) == "1" and not _may_skip(item)
            and not hasattr(report, "wasxfail")):
        report.outcome = "failed"
        report.longrepr = f"skipped where every test must run ({REQUIRE_ALL}=1): {_skip_reason(report)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get(REQUIRE_ALL) == "1" and not _may_skip(collector):
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid}: skipped at collection where every test must run "
                           f"({REQUIRE_ALL}=1): {_skip_reason(report)}")


@contextlib.contextmanager
def _data_home(path: Path) -> Iterator[None]:
    """XDG_DATA_HOME (where fleet history is recorded) set to `path` for the block, then put back."""
    previous = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = previous


@pytest.fixture(scope="session", autouse=True)
def _fleet_history_of_the_tests(tmp_path_factory):
    """Runs the tests start record into a store of the test session's own, never the user's (this
    one serves module- and session-scoped fixtures, set up before any test's own)."""
    with _data_home(tmp_path_factory.mktemp("xdg-data")):
        yield


@pytest.fixture(autouse=True)
def _fleet_history_of_each_test(_fleet_history_of_the_tests, tmp_path_factory):
    """And a store of each test's own: what a test's report shows never depends on which tests ran
    before it (a run's HTML report places its figures among the earlier runs in the store)."""
    with _data_home(tmp_path_factory.mktemp("xdg-data-test")):
        yield


# scripts/test.sh prepares the kube-apiserver and the second torch in the background while the
# first tests run (tests/setup_state.py): the tests that wait for them run last.
WAITS_FOR_SETUP = "waits_for_setup"


def pytest_collection_modifyitems(config, items):
    # A `comparison` test measures another method side by side for bench/results (PREFLIGHT_BENCH_RESULTS set);
    # what it shows of behaviour is covered elsewhere, so the suite leaves it out (deselected, not skipped).
    if not os.environ.get("PREFLIGHT_BENCH_RESULTS"):
        compared = [item for item in items if item.get_closest_marker("comparison") is not None]
        if compared:
            config.hook.pytest_deselected(items=compared)
            items[:] = [item for item in items if item.get_closest_marker("comparison") is None]
    k8s = TESTS / "k8s"
    late = [item for item in items
            if item.get_closest_marker(WAITS_FOR_SETUP) is not None or Path(str(item.fspath)).is_relative_to(k8s)]
    if late:
        chosen = set(map(id, late))
        items[:] = [item for item in items if id(item) not in chosen] + late
