from __future__ import annotations

import pytest

from preflight.core.nodeset import fold
from preflight.core.nodeset import NodeSetError, expand


def test_expand_ranges_lists_and_padding():
    assert expand("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]


def test_the_core_fold_is_the_inverse_of_expand():
    names = [f"gpu{i:03d}" for i in [*range(1, 64), 65]]
    assert fold(names) == "gpu[001-063,065]"
    assert sorted(expand(fold(names))) == sorted(names)
    assert fold(["login", "gpu01"]) == "gpu01,login"  # ClusterShell's order, as every report writes it


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu[3-1]", "gpu[a-b]", "gpu]"])
def test_bad_ranges_say_what_is_wrong(bad):
    with pytest.raises(NodeSetError):
        expand(bad)


def test_a_node_set_past_the_limit_is_refused_before_it_is_expanded():
    import time

    import pytest

    from preflight.core.nodeset import NodeSetError, expand

    start = time.monotonic()
    for text in ("n[1-100000000]", "a[1-1000]-b[1-1000]", "x[1-60000],y[1-60000]", "n[1-9[0-9]]"):
        with pytest.raises(NodeSetError):
            expand(text)
    assert time.monotonic() - start < 0.5
