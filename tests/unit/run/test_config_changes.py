"""What a config file changes, as a run says it before it starts: code it runs, history, silences,
thresholds over the profile's or the default value; a file that changes nothing says nothing."""

from __future__ import annotations

from preflight.core import config as config_mod
from preflight.core.registry import discover
from preflight.run.config_changes import announce, changes

CHECKS = discover().checks


def test_each_change_is_named_with_what_it_replaces(tmp_path):
    path = tmp_path / "preflight.toml"
    path.write_text('[checks."collectives.local"]\nmin_busbw_gbps = 1.0\n\n[checks."canary.training"]\n'
                    'entry = "team:build"\n\n[checks."node.environment"]\nmin_shm_gib = 0.01\n\n'
                    '[history]\nurl = "postgresql://u:hunter2@db/fleet"\n\n[run]\nfail_on = "fail"\n\n'
                    '[silence]\n"node.environment.shm-small" = {reason = "small pool", until = 2027-01-31}\n')
    config = config_mod.load(str(path), CHECKS, profile="h100-8x")
    lines = changes(config, CHECKS)
    assert "runs your code: canary.training.entry = 'team:build' (imported and executed by the check)" in lines
    assert "judges with collectives.local.min_busbw_gbps = 1.0, over 460.0 (profile h100-8x)" in lines
    assert "judges with node.environment.min_shm_gib = 0.01, over 1.0 (default)" in lines
    assert "silences node.environment.shm-small (small pool, until 2027-01-31)" in lines
    assert "judges with run.fail_on = 'fail'" in lines
    history = next(line for line in lines if "history" in line)
    assert "hunter2" not in history and "db/fleet" in history
    assert announce(lines)[0].startswith(f"./preflight.toml changes this run ({len(lines)} things)")


def test_a_file_that_changes_nothing_says_nothing(tmp_path):
    path = tmp_path / "preflight.toml"
    path.write_text("# nothing yet\n")
    assert changes(config_mod.load(str(path), CHECKS), CHECKS) == [] and announce([]) == []
