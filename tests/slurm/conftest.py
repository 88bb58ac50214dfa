"""Fixtures for tests against a real Slurm cluster on this machine (see slurmbed.py).

Every Slurm test bed a test makes is taken down when the test ends, passed or failed: daemons,
job steps, namespaces (tests/cluster's make_testbed does it). Tests marked `root` skip with the
reason where one cannot be built (not root, no `ip netns`, Slurm or munge not installed); in CI a
skip fails the run (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.conftest import make_testbed  # noqa: F401 - the fixture make_slurm_bed builds on
from tests.slurm.slurmbed import SlurmBed, slurm_unavailable_reason


@pytest.fixture(autouse=True)
def _skip_without_slurm(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("root") is not None:
        reason = slurm_unavailable_reason()
        if reason:
            pytest.skip(f"Slurm test bed unavailable: {reason}")


@pytest.fixture
def make_slurm_bed(make_testbed) -> Callable[..., SlurmBed]:  # noqa: F811
    """`make_slurm_bed(3, shm={2: "16m"})`: a started Slurm cluster, stopped after the test."""
    return lambda count, **kwargs: make_testbed(count, kind=SlurmBed, **kwargs)
