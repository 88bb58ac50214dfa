"""Learned floors: the profile text loads as a profile, and it judges with what it learned."""

from __future__ import annotations

import pytest

from preflight.history.learn import LearnError, learn_baseline
from preflight.history.stats import median
from preflight.history.store import Store
from tests.unit.history import fleet, scenario


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with Store(tmp_path_factory.mktemp("learn") / "history.sqlite") as opened:
        scenario.ingest_all(opened)
        yield opened


def test_the_learned_profile_loads_and_judges_a_lagging_node(store, tmp_path):
    from preflight.core import config
    from preflight.core.check import Expect
    from preflight.core.registry import discover

    text, provenance = learn_baseline(store, image="driver=550.54.15")
    path = tmp_path / "learned.toml"
    path.write_text(text)
    checks = discover().checks
    loaded = config.load(None, checks, profile=str(path))
    assert loaded.profile_sources and "GO runs" in loaded.profile_sources[0]
    check = checks["collectives.local"]
    params = loaded.params_for(check)
    learned = provenance["floors"]["collectives.local.min_busbw_gbps"]
    assert params.min_busbw_gbps == learned["value"] and params.busbw_size_bytes == learned["size"]
    # The profile's floor judges a node lagging its peers by 10% (which the shipped floor passes) FAIL,
    # and a node like the healthy ones PASS.
    typical = median(scenario.busbw_values(scenario.image_a_runs()))
    lagging = check().evaluate(fleet.collectives_facts(scenario.SLOW * typical), params, Expect())
    healthy = check().evaluate(fleet.collectives_facts(typical), params, Expect())
    assert lagging.status.value == "FAIL" and healthy.status.value == "PASS"


def test_provenance_counts_runs_nodes_and_dates(store):
    _, provenance = learn_baseline(store, image="driver=550.54.15")
    assert provenance["runs"] == scenario.A_RUNS - 1
    assert provenance["nodes"] == len(scenario.NODES)
    assert provenance["from"] < provenance["to"]
    assert provenance["gpus_per_node"] == 8


def test_too_few_healthy_runs_are_refused_unless_asked(store):
    since = scenario.B_START.replace(tzinfo=None) + fleet.timedelta(days=4)
    with pytest.raises(LearnError, match="--min-runs"):
        learn_baseline(store, since=since)
    text, provenance = learn_baseline(store, since=since, min_runs=2)
    assert provenance["runs"] == 3 and "min_busbw_gbps" in text
