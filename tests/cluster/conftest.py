"""Fixtures for tests that run several hosts as network namespaces on this machine (see testbed.py).

Every test bed a test makes is taken down when the test ends, passed or failed; `bed3`, shared by a
module's tests that leave it as it was, when the module ends. Tests marked `root` skip with the
reason where a test bed cannot be built (not root, no `ip netns`, no sshd).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from preflight.core.check import Expect
from preflight.engine.context import ClusterContext
from tests.cluster.testbed import TestBed, module_bed, unavailable_reason


@pytest.fixture(autouse=True)
def _skip_without_test_bed(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("root") is not None:
        reason = unavailable_reason()
        if reason:
            pytest.skip(f"multi-node test bed unavailable: {reason}")


@pytest.fixture
def make_testbed() -> Iterator[Callable[..., TestBed]]:
    """`make_testbed(3, rates={2: "2gbit"})`: a started test bed, stopped after the test.
    `kind=` builds a subclass (tests/slurm's SlurmBed) with the same guarantee."""
    beds: list[TestBed] = []

    def make(count: int, kind: type[TestBed] = TestBed, **kwargs) -> TestBed:
        bed = kind(count, **kwargs)
        beds.append(bed)  # before start(), so a half-built bed is taken down too
        bed.start()
        return bed

    yield make
    for bed in reversed(beds):
        bed.stop()


@pytest.fixture
def testbed3(make_testbed) -> TestBed:
    """A three-node bed of the test's own: for a test that breaks its bed (stops an sshd, takes a link down)."""
    return make_testbed(3)


@pytest.fixture(scope="module")
def bed3() -> Iterator[TestBed]:
    """A three-node bed shared by the module's tests that leave it as they found it (no fault, nothing
    left running: what they assert anyway); built once, stopped after the module's last test."""
    yield from module_bed(3)


@pytest.fixture
def cluster_context(tmp_path: Path) -> Callable[..., ClusterContext]:
    """A cluster check's context over a test bed's nodes, named n1, n2, ..."""

    def make(bed: TestBed, indexes: list[int] | None = None, unreachable: list[str] | None = None,
             timeout_s: float = 240, expect: Expect | None = None) -> ClusterContext:
        chosen = indexes or [n.index for n in bed.nodes]
        specs = [bed.transport(i, name=bed.node(i).name).to_spec() for i in chosen]
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        return ClusterContext(nodes=specs, output_dir=tmp_path, scratch_dir=scratch, expect=expect or Expect(),
                              timeout_s=timeout_s, unreachable=list(unreachable or []))

    yield make
    shutil.rmtree(tmp_path / "scratch", ignore_errors=True)
