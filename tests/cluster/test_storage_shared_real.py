"""storage.shared on the namespace test bed: the nodes share this machine's filesystem, and a node can
be given a private tmpfs over a directory (mounted in its sshd's own mount namespace)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from preflight.engine.execute import execute
from preflight.core.model import Status
from preflight_checks.storage.shared import Params, StorageShared

pytestmark = pytest.mark.root


@pytest.fixture
def checkpoint_dir():
    path = Path(tempfile.mkdtemp(prefix="pft-ckpt-", dir="/tmp"))
    yield path
    for leftover in path.iterdir():
        leftover.unlink()
    path.rmdir()


def run_check(ctx, directory) -> object:
    return execute(StorageShared(), ctx, Params(dir=str(directory), visible_within_s=2), ctx.expect, node="cluster")


def test_a_shared_directory_passes_and_the_tokens_are_removed(testbed3, cluster_context, checkpoint_dir):
    result = run_check(cluster_context(testbed3), checkpoint_dir)
    assert result.status is Status.PASS, result.summary
    assert result.facts["seen"] == {r: {w: True for w in ("n1", "n2", "n3")} for r in ("n1", "n2", "n3")}
    assert list(checkpoint_dir.iterdir()) == []


def test_a_node_with_a_private_directory_fails_naming_it(make_testbed, cluster_context, checkpoint_dir):
    bed = make_testbed(3, private_dirs={3: [str(checkpoint_dir)]})
    result = run_check(cluster_context(bed), checkpoint_dir)
    assert result.status is Status.FAIL
    assert "(n1, n2; n3)" in result.summary
    assert "n3 does not see the tokens written by n1, n2" in result.details
    assert result.facts["writes"]["n3"]["fstype"] == "tmpfs"
    assert list(checkpoint_dir.iterdir()) == []  # n1's and n2's tokens removed; n3's was in its tmpfs


def test_a_missing_directory_fails_with_the_reason(testbed3, cluster_context, checkpoint_dir):
    result = run_check(cluster_context(testbed3), checkpoint_dir / "absent")
    assert result.status is Status.FAIL
    assert "n1, n2, n3 cannot write" in result.summary and "no such directory" in result.summary


def test_an_unreachable_node_is_error_naming_it(testbed3, cluster_context, checkpoint_dir):
    testbed3.stop_sshd(testbed3.node(2))
    result = run_check(cluster_context(testbed3), checkpoint_dir)
    assert result.status is Status.ERROR
    assert "n2" in result.summary and "could not be reached" in result.summary
    assert list(checkpoint_dir.iterdir()) == []
