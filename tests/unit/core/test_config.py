import dataclasses

import pytest

from preflight.core import config as cfg
from preflight.core.registry import discover
from preflight_checks.node.environment import NodeEnvironment

CHECKS = {"node.environment": NodeEnvironment}


def test_defaults_without_a_file():
    config = cfg.load(None, CHECKS)
    assert config.params_for(NodeEnvironment).min_shm_gib == 1.0
    assert config.timeout_for(NodeEnvironment) == NodeEnvironment.timeout_s


def test_file_overrides_defaults_and_cli_overrides_file():
    config = cfg.parse(
        '[run]\ntimeout = 90\nfail_on = "warn"\n[expect]\ngpus_per_node = 8\n'
        '[checks."node.environment"]\nmin_shm_gib = 16\ntimeout = 20\n',
        CHECKS)
    assert config.fail_on == "warn" and config.expect.gpus_per_node == 8
    assert config.params_for(NodeEnvironment).min_shm_gib == 16
    assert config.timeout_for(NodeEnvironment) == 20
    cfg.apply_cli_settings(config, ["node.environment.min_shm_gib=32", "expect.gpus_per_node=4"], CHECKS)
    assert config.params_for(NodeEnvironment).min_shm_gib == 32
    assert config.expect.gpus_per_node == 4


def test_area_shorthand_reaches_the_checks_of_that_area():
    config = cfg.parse("[node]\nmin_open_files = 4096\n", CHECKS)
    assert config.params_for(NodeEnvironment).min_open_files == 4096


def test_unknown_parameter_names_file_key_and_line():
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse('[checks."node.environment"]\n\nmin_shm_gb = 16\n', CHECKS, "site.toml")
    message = str(err.value)
    assert message.startswith("site.toml:3: checks.node.environment.min_shm_gb:")
    assert "unknown parameter" in message and "min_shm_gib" in message


def test_wrong_type_is_an_error():
    with pytest.raises(cfg.ConfigError, match=r"expected a number, got str '16'"):
        cfg.parse('[checks."node.environment"]\nmin_shm_gib = "16"\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="expected an integer"):
        cfg.parse("[expect]\ngpus_per_node = 8.5\n", CHECKS)


def test_invalid_toml_reports_the_line():
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse("[run]\ntimeout = = 3\n", CHECKS, "bad.toml")
    assert err.value.line == 2 and "invalid TOML" in str(err.value)


def test_unknown_check_id_and_section():
    with pytest.raises(cfg.ConfigError, match="unknown check id"):
        cfg.parse('[checks."gpu.visiblity"]\nx = 1\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="unknown section"):
        cfg.parse("[nodes]\nx = 1\n", CHECKS)
    with pytest.raises(cfg.ConfigError, match="fail_on"):
        cfg.parse('[run]\nfail_on = "error"\n', CHECKS)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(cfg.ConfigError, match="file not found"):
        cfg.load(tmp_path / "nope.toml", CHECKS)


def test_cli_setting_errors():
    config = cfg.Config()
    with pytest.raises(cfg.ConfigError, match="unknown parameter for node.environment"):
        cfg.apply_cli_settings(config, ["node.environment.nope=1"], CHECKS)
    with pytest.raises(cfg.ConfigError, match="KEY=VALUE"):
        cfg.apply_cli_settings(config, ["node.environment.min_shm_gib"], CHECKS)


def test_init_template_covers_every_check_and_parses_back_uncommented():
    checks = discover().checks
    from preflight.core.config_init import render_init

    text = render_init(checks)
    for check_id, check in checks.items():
        assert (f"[{check.config_table}]" if check.config_table else f'[checks."{check_id}"]') in text
    # Uncommenting every setting that has a default must give a valid config holding those defaults.
    uncommented = []
    for line in text.splitlines():
        if line.startswith("# ") and " = " in line and "(unset" not in line:
            line = line[2:].split("  #")[0]
        uncommented.append(line)
    parsed = cfg.parse("\n".join(uncommented), checks)
    assert parsed.default_timeout == 300 and parsed.expect.gpus_per_node == 8
    assert parsed.timeouts["node.environment"] == NodeEnvironment.timeout_s
    assert parsed.params_for(NodeEnvironment).min_open_files == 65536


def test_every_shipped_profile_names_its_sources_and_validates():
    checks = discover().checks
    for name in cfg.shipped_profiles():
        config = cfg.load(None, checks, profile=name)
        assert config.profile == name
        assert config.profile_sources, f"profile {name} cites no source"
        assert config.expect.gpus_per_node == 8


def test_config_file_overrides_profile(tmp_path):
    checks = discover().checks
    path = tmp_path / "preflight.toml"
    path.write_text('[checks."collectives.local"]\nmin_busbw_gbps = 300.0\n[expect]\nnodes = 2\n')
    config = cfg.load(path, checks, profile="h100-8x")
    assert config.params["collectives.local"]["min_busbw_gbps"] == 300.0
    assert config.expect.gpus_per_node == 8 and config.expect.nodes == 2


def test_user_profile_file_and_unknown_profile(tmp_path):
    own = tmp_path / "l40s-4x.toml"
    own.write_text('[profile]\ndescription = "ours"\nsources = ["our own burn-in, 2026-10"]\n[expect]\ngpus_per_node = 4\n')
    config = cfg.load(None, CHECKS, profile=str(own))
    assert config.expect.gpus_per_node == 4 and config.profile_sources == ["our own burn-in, 2026-10"]
    with pytest.raises(cfg.ConfigError, match="unknown profile; shipped profiles: a100-8x, h100-8x, h200-8x"):
        cfg.load(None, CHECKS, profile="tpu-v5")


def test_profile_table_is_only_for_profiles():
    with pytest.raises(cfg.ConfigError, match="unknown section"):
        cfg.parse('[profile]\ndescription = "x"\n', CHECKS)


ALL = discover().checks


# -- values, not just types ------------------------------------------------------------------------

def test_a_wrong_type_is_reported_at_its_own_line_not_the_first_with_that_name():
    text = ('[checks."node.environment"]\ntimeout = 30\n\n[checks."net.bandwidth"]\nmin_gbps = 10\n'
            'timeout = "slow"\n')
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse(text, ALL, "preflight.toml")
    assert err.value.line == 6 and err.value.key == "checks.net.bandwidth.timeout"
    assert "preflight.toml:6" in str(err.value)


@pytest.mark.parametrize("text, key, line, words", [
    ('[expect]\ngpus_per_node = -8\n', "expect.gpus_per_node", 2, "must not be negative"),
    ('[run]\ntimeout = 0\n', "run.timeout", 2, "greater than zero"),
    ('[checks."net.bandwidth"]\nstreams = -4\n', "checks.net.bandwidth.streams", 2, "must not be negative"),
    ('[checks."net.bandwidth"]\nmin_gbps = -1.0\n', "checks.net.bandwidth.min_gbps", 2, "must not be negative"),
    ('[checks."node.environment"]\nmin_shm_gib = 0\n', "checks.node.environment.min_shm_gib", 2, "greater than zero"),
    ('[scaling]\nmin_efficiency = 1.5\n', "scaling.min_efficiency", 2, "fraction"),
    ('[checks."collectives.local"]\nsizes_bytes = [1024, 0]\n', "checks.collectives.local.sizes_bytes", 2, "greater than zero"),
])
def test_values_are_checked_not_just_types(text, key, line, words):
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse(text, ALL, "preflight.toml")
    assert err.value.key == key and err.value.line == line and words in str(err.value)


@pytest.mark.parametrize("text, key, words", [
    ('[checks."net.bandwidth"]\nmin_gbps = nan\n', "checks.net.bandwidth.min_gbps", "finite"),
    ('[checks."net.bandwidth"]\nserver_start_timeout_s = inf\n', "checks.net.bandwidth.server_start_timeout_s", "finite"),
    ('[checks."canary.training"]\nmax_data_wait_share = -inf\n', "checks.canary.training.max_data_wait_share", "finite"),
    ('[checks."dataloader.throughput"]\ndataset_kwargs = {lr = nan}\n', "checks.dataloader.throughput.dataset_kwargs",
     "finite"),
    ('[checks."net.bandwidth"]\nstreams = 0\n', "checks.net.bandwidth.streams", "at least 1"),
    ('[checks."net.bandwidth"]\npattern = "star"\n', "checks.net.bandwidth.pattern", "one of ring, full"),
    ('[checks."scaling.multi_gpu"]\ndevice_counts = [1, 0]\n', "checks.scaling.multi_gpu.device_counts", "at least 1"),
    ('[checks."gpu.visibility"]\nmin_free_memory_fraction = 1.2\n', "checks.gpu.visibility.min_free_memory_fraction",
     "fraction"),
    ('[checks."net.bandwidth"]\nduration_s = 0\n', "checks.net.bandwidth.duration_s", "greater than zero"),
    ('[checks."collectives.local"]\nmax_latency_us = 0.0\n', "checks.collectives.local.max_latency_us",
     "greater than zero"),
])
def test_values_are_checked_against_the_kind_their_field_declares(text, key, words):
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse(text, ALL, "preflight.toml")
    assert err.value.key == key and err.value.line == 2 and words in str(err.value)


def test_nan_and_infinity_are_refused_through_set_too():
    for setting in ("net.bandwidth.min_gbps=nan", "checkpoint.roundtrip.size_mb=inf",
                    "gpu.visibility.min_host_device_gbps=-inf"):
        with pytest.raises(cfg.ConfigError) as err:
            cfg.apply_cli_settings(cfg.load(None, ALL), [setting], ALL)
        assert "finite" in str(err.value) and setting.split("=")[0] in str(err.value)


def test_the_kind_decides_not_the_name():
    # A fraction of zero is a value (min_memory_headroom = 0: no headroom asked for) although its
    # name starts with min_; a count of zero is allowed where its field does not raise the floor.
    config = cfg.parse('[checks."canary.training"]\nmin_memory_headroom = 0.0\nwarmup = 0\n', ALL)
    assert config.params["canary.training"] == {"min_memory_headroom": 0.0, "warmup": 0}


def test_a_parameter_that_declares_no_kind_is_only_refused_what_is_not_finite():
    import dataclasses

    from preflight.core.check import Check

    @dataclasses.dataclass
    class Plain:
        min_rate: float = 1.0
        max_count: int = 3

    class ThirdParty(Check):
        id = "acme.plain"
        Params = Plain

    checks = {"acme.plain": ThirdParty}
    config = cfg.parse('[checks."acme.plain"]\nmin_rate = 0.0\nmax_count = -1\n', checks)
    assert config.params["acme.plain"] == {"min_rate": 0.0, "max_count": -1}
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse('[checks."acme.plain"]\nmin_rate = nan\n', checks)
    assert err.value.key == "checks.acme.plain.min_rate"


def test_every_built_in_parameter_declares_its_kind_and_meaning():
    from preflight.core.check import PARAM_HELP, PARAM_KIND, PARAM_KINDS
    from tests.conftest import built_in_checks

    for check_id, check in built_in_checks(ALL).items():
        for field in dataclasses.fields(check.Params):
            assert field.metadata.get(PARAM_KIND) in PARAM_KINDS, f"{check_id}.{field.name}"
            assert field.metadata.get(PARAM_HELP), f"{check_id}.{field.name}"


def test_an_integer_ceiling_of_zero_is_a_count_and_allowed():
    config = cfg.parse('[checks."gpu.visibility"]\nmax_volatile_uncorrectable_ecc = 0\n', ALL)
    assert config.params["gpu.visibility"]["max_volatile_uncorrectable_ecc"] == 0


def test_a_warn_level_stricter_than_the_pass_level_is_an_error(tmp_path):
    path = tmp_path / "preflight.toml"
    path.write_text('[checks."scaling.multi_gpu"]\nmin_efficiency = 0.8\nwarn_efficiency = 0.85\n')
    config = cfg.load(path, ALL)
    with pytest.raises(cfg.ConfigError) as err:
        cfg.validate(config, ALL)
    assert err.value.key == "checks.scaling.multi_gpu.warn_efficiency" and "stricter" in str(err.value)
    path.write_text('[checks."scaling.multi_gpu"]\nmin_efficiency = 0.8\nwarn_efficiency = 0.7\n')
    cfg.validate(cfg.load(path, ALL), ALL)
    # Against the default PASS level too (0.90), through --set.
    config = cfg.load(None, ALL)
    cfg.apply_cli_settings(config, ["scaling.multi_gpu.warn_efficiency=0.95"], ALL)
    with pytest.raises(cfg.ConfigError):
        cfg.validate(config, ALL)


def test_the_checkpoint_dir_is_the_directory_storage_shared_checks():
    from preflight_checks.checkpoint.roundtrip import CheckpointRoundtrip
    from preflight_checks.storage.shared import StorageShared

    checks = {"checkpoint.roundtrip": CheckpointRoundtrip, "storage.shared": StorageShared}
    config = cfg.parse('[checkpoint]\ndir = "/shared/checkpoints"\n', checks)
    assert config.params_for(StorageShared).dir == "/shared/checkpoints"
    assert config.params_for(CheckpointRoundtrip).dir == "/shared/checkpoints"
    # Its own setting wins, whichever comes first in the file.
    for text in ('[checks."storage.shared"]\ndir = "/other"\n[checkpoint]\ndir = "/shared/checkpoints"\n',
                 '[checkpoint]\ndir = "/shared/checkpoints"\n[checks."storage.shared"]\ndir = "/other"\n'):
        assert cfg.parse(text, checks).params_for(StorageShared).dir == "/other"
    config = cfg.parse("", checks)
    cfg.apply_cli_settings(config, ["checkpoint.dir=/mnt/ckpt"], checks)
    assert config.params_for(StorageShared).dir == "/mnt/ckpt"
    cfg.apply_cli_settings(config, ["checkpoint.dir=/a", "storage.shared.dir=/b"], checks)
    assert config.params_for(StorageShared).dir == "/b" and config.params_for(CheckpointRoundtrip).dir == "/a"


def test_silence_needs_a_finding_id_of_a_known_check_a_reason_and_a_date():
    text = ('[silence]\n"node.environment.memlock-limited" = {reason = "no RDMA on this pool", until = 2027-01-31}\n'
            '"node.environment.nofile-low" = {reason = "raised by the job script"}\n')
    config = cfg.parse(text, CHECKS)
    assert config.silence == {"node.environment.memlock-limited": {"reason": "no RDMA on this pool", "until": "2027-01-31"},
                              "node.environment.nofile-low": {"reason": "raised by the job script", "until": ""}}
    for bad, words in (('"node.enviroment.x" = {reason = "r"}', "did you mean 'node.environment'"),
                       ('"node.environment.shm-small" = {until = 2027-01-01}', "needs a reason"),
                       ('"node.environment.shm-small" = {reason = "r", until = "soon"}', "must be an ISO date"),
                       ('"node.environment.shm-small" = {reason = "r", untill = 2027-01-01}', "did you mean 'until'")):
        with pytest.raises(cfg.ConfigError, match=words.replace("(", r"\(")):
            cfg.parse(f"[silence]\n{bad}\n", CHECKS)


def test_unknown_names_get_a_did_you_mean():
    with pytest.raises(cfg.ConfigError, match="did you mean 'min_shm_gib'"):
        cfg.parse('[checks."node.environment"]\nmin_shm_gb = 2\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="did you mean 'expect'"):
        cfg.parse("[expcet]\nnodes = 2\n", CHECKS)
    with pytest.raises(cfg.ConfigError, match="did you mean 'node.environment'"):
        cfg.parse('[checks."node.enviroment"]\nmin_shm_gib = 2\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="did you mean 'min_shm_gib'"):
        cfg.apply_cli_settings(cfg.parse("", CHECKS), ["node.environment.min_shm_gb=2"], CHECKS)
    with pytest.raises(cfg.ConfigError, match="did you mean 'node.environment.min_shm_gib'"):
        cfg.apply_cli_settings(cfg.parse("", CHECKS), ["node.enviroment.min_shm_gib=2"], CHECKS)


def test_the_job_section_reaches_the_checks_that_plan_for_the_job():
    from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume

    checks = {**CHECKS, "checkpoint.cluster_resume": CheckpointClusterResume}
    config = cfg.parse("[job]\nnodes = 128\ndays = 30\n", checks)
    assert config.params_for(CheckpointClusterResume).job_nodes == 128
    assert config.params_for(CheckpointClusterResume).job_days == 30
    cfg.apply_cli_settings(config, ["job.days=12"], checks)
    assert config.params_for(CheckpointClusterResume).job_days == 12
    with pytest.raises(cfg.ConfigError, match="job.gpus"):
        cfg.parse("[job]\ngpus = 8\n", checks)
    with pytest.raises(cfg.ConfigError, match="unknown section"):
        cfg.parse("[job]\nnodes = 8\n", CHECKS)  # no check plans for a job: the section is unknown


def test_the_job_table_is_the_plan_of_job_plan_and_a_bad_value_names_its_key():
    from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume
    from preflight_checks.job.plan import JobPlan

    checks = {**CHECKS, "checkpoint.cluster_resume": CheckpointClusterResume, "job.plan": JobPlan}
    config = cfg.parse('[job]\nnodes = 16\ngpus_per_node = 8\nmicro_batch = 4\nlearning_rate = 3e-4\n'
                       'lr_scaling = "sqrt"\noptimizer = "adamw"\ndays = 12\n', checks)
    plan = config.params_for(JobPlan)
    assert (plan.nodes, plan.gpus_per_node, plan.micro_batch, plan.learning_rate) == (16, 8, 4, 3e-4)
    assert plan.lr_scaling == "sqrt" and plan.grad_accum is None  # every key is optional
    assert config.params_for(CheckpointClusterResume).job_nodes == 16  # the same nodes, for the interval advice
    assert config.params_for(CheckpointClusterResume).job_days == 12
    cfg.apply_cli_settings(config, ["job.micro_batch=8"], checks)
    assert config.params_for(JobPlan).micro_batch == 8
    for body, key, says in (("micro_batch = -1", "job.micro_batch", "negative"),
                            ("grad_accum = 0", "job.grad_accum", "at least 1"),
                            ("learning_rate = 0", "job.learning_rate", "greater than zero"),
                            ("tuned_learning_rate = -0.1", "job.tuned_learning_rate", "negative"),
                            ('nodes = "four"', "job.nodes", "expected an integer"),
                            ("optimizer = 3", "job.optimizer", "expected a string"),
                            ('lr_scaling = "cubic"', "job.lr_scaling", "must be one of linear, sqrt, none"),
                            ("micro_bach = 4", "job.micro_bach", "did you mean 'micro_batch'")):
        with pytest.raises(cfg.ConfigError, match=says) as raised:
            cfg.parse(f"[job]\n{body}\n", checks)
        assert raised.value.key == key


def test_init_writes_a_commented_job_table():
    from preflight.core.config_init import render_init
    from preflight_checks.checkpoint.cluster_resume import CheckpointClusterResume
    from preflight_checks.job.plan import JobPlan

    checks = {**CHECKS, "checkpoint.cluster_resume": CheckpointClusterResume, "job.plan": JobPlan}
    text = render_init(checks)
    table = text[text.index("[job]\n"):].split("\n\n")[0].splitlines()
    assert '[checks."job.plan"]' not in text
    for key in ("nodes", "gpus_per_node", "micro_batch", "grad_accum", "tensor_parallel", "pipeline_parallel",
                "learning_rate", "warmup_steps", "optimizer", "tuned_at_gpus", "tuned_global_batch",
                "tuned_learning_rate", "lr_scaling", "days"):
        assert any(line.startswith(f"# {key}: ") for line in table), key
        assert any(line.startswith(f"# {key} = ") for line in table), key
    assert all(line.startswith("#") for line in table[1:])


@pytest.mark.parametrize("until", ['0', 'false', '""', '"next year"', '[]', '{}', '"2027-13-01"', '20270131',
                                   '"31/01/2027"', '10:00:00', '"  "'])
def test_a_silence_end_that_is_not_an_iso_date_is_refused_naming_the_key(until):
    with pytest.raises(cfg.ConfigError, match=r"silence\.node\.environment\.shm-small\.until"):
        cfg.parse(f'[silence]\n"node.environment.shm-small" = {{reason = "r", until = {until}}}\n', CHECKS)


@pytest.mark.parametrize("until, day", [("2027-01-31", "2027-01-31"), ('"2027-01-31"', "2027-01-31"),
                                        ("2027-01-31T18:00:00", "2027-01-31"), ('"2027-01-31T18:00:00Z"', "2027-01-31"),
                                        ("2027-01-31 18:00:00+02:00", "2027-01-31")])
def test_a_silence_ends_on_an_iso_date_or_date_time(until, day):
    config = cfg.parse(f'[silence]\n"node.environment.shm-small" = {{reason = "r", until = {until}}}\n', CHECKS)
    assert config.silence["node.environment.shm-small"]["until"] == day


def test_a_silence_must_name_a_finding_its_check_declares():
    with pytest.raises(cfg.ConfigError, match="did you mean 'node.environment.memlock-limited'"):
        cfg.parse('[silence]\n"node.environment.memlock-limted" = {reason = "r"}\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="declares no finding"):
        cfg.parse('[silence]\n"node.environment.anything" = {reason = "r"}\n', CHECKS)


@pytest.mark.parametrize("finding_id", ["node.environment.unreachable", "node.environment.timed-out",
                                        "node.environment.nodes-unreachable"])
def test_what_a_transport_reports_cannot_be_silenced(finding_id):
    with pytest.raises(cfg.ConfigError, match="cannot be silenced"):
        cfg.parse(f'[silence]\n"{finding_id}" = {{reason = "r"}}\n', CHECKS)


@pytest.mark.parametrize("url", ["postgresql://u:hunter2XYZ@db:5x32/h", "postgresql://u:hunter2XYZ@[::1/h",
                                 "postgresql://u:hunter2XYZ@db:99999/h"])
def test_a_history_url_that_does_not_parse_is_refused_naming_the_key_with_its_password_masked(url):
    with pytest.raises(cfg.ConfigError, match="history.url") as caught:
        cfg.parse(f'[history]\nurl = "{url}"\n', CHECKS)
    assert "hunter2XYZ" not in str(caught.value)


def test_a_url_setting_whose_port_is_no_number_is_refused_naming_the_key_with_its_password_masked():
    from preflight_checks.monitoring.alarms import MonitoringAlarms

    checks = {"monitoring.alarms": MonitoringAlarms}
    with pytest.raises(cfg.ConfigError, match="monitoring.alarms.prometheus_url") as caught:
        cfg.apply_cli_settings(cfg.parse("", checks), ["monitoring.alarms.prometheus_url=http://a:hunter2XYZ@h:9x9"],
                               checks)
    assert "hunter2XYZ" not in str(caught.value)


def test_an_unknown_run_key_is_refused_naming_it_and_what_run_accepts():
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse("[run]\ntimeoutt = 3\n", CHECKS, "site.toml")
    assert err.value.key == "run.timeoutt" and "fail_on" in str(err.value) and "timeout" in str(err.value)


def test_the_settings_of_a_plugin_skip_kept_from_being_imported_are_passed_over():
    from preflight.core.registry import CheckSet

    checks = CheckSet(CHECKS)
    checks.not_imported = {"acme.probe": "acme-checks"}
    config = cfg.parse('[checks."acme.probe"]\nx = 1\n[acme]\ny = 2\n[node]\nmin_open_files = 4096\n', checks)
    assert config.params_for(NodeEnvironment).min_open_files == 4096
    with pytest.raises(cfg.ConfigError, match="unknown check id"):
        cfg.parse('[checks."acme.probe"]\nx = 1\n', CHECKS)
    with pytest.raises(cfg.ConfigError, match="unknown section"):
        cfg.parse("[acme]\ny = 2\n", CHECKS)


@pytest.mark.parametrize("kind", ["could-not-measure", "crashed", "error"])
def test_what_measured_nothing_cannot_be_silenced(kind):
    with pytest.raises(cfg.ConfigError, match=rf"silence\.node\.environment\.{kind}.*cannot be silenced"):
        cfg.parse(f'[silence]\n"node.environment.{kind}" = {{reason = "r"}}\n', CHECKS)


def test_a_check_that_declares_no_finding_kinds_accepts_no_silence():
    from preflight.core.check import Check

    class Quiet(Check):
        id = "acme.quiet"

    with pytest.raises(cfg.ConfigError, match=r"silence\.acme\.quiet\.anything.*declares no finding kinds"):
        cfg.parse('[silence]\n"acme.quiet.anything" = {reason = "r"}\n', {**CHECKS, "acme.quiet": Quiet})


def test_a_lookalike_id_is_refused_with_the_one_it_looks_like():
    with pytest.raises(cfg.ConfigError, match="did you mean 'node.environment.shm-small'"):
        cfg.parse('[silence]\n"node.environment.\uff53hm-small" = {reason = "r"}\n', CHECKS)


def test_a_cluster_checks_default_timeout_grows_with_the_nodes_its_isolation_pass_searches():
    from preflight_checks.net.bandwidth import NetBandwidth

    config = cfg.load(None, {"net.bandwidth": NetBandwidth})
    base = NetBandwidth.timeout_s
    assert config.timeout_for(NetBandwidth) == base  # the node count unknown: the default
    assert config.timeout_for(NetBandwidth, 2) == base  # two nodes: no pass
    at_8, at_1024 = config.timeout_for(NetBandwidth, 8), config.timeout_for(NetBandwidth, 1024)
    assert base < at_8 < at_1024  # 44 and 72 rounds of 9 s, less the 120 s timeout_s holds
    assert at_8 == base + 44 * 9 - 120 and at_1024 == base + 72 * 9 - 120
    # what the user sets wins: the check's timeout, every check's, or a pass of their own length
    assert cfg.parse('[checks."net.bandwidth"]\ntimeout = 200\n', {"net.bandwidth": NetBandwidth}) \
        .timeout_for(NetBandwidth, 1024) == 200
    assert cfg.parse("[run]\ntimeout = 90\n", {"net.bandwidth": NetBandwidth}).timeout_for(NetBandwidth, 1024) == 90
    assert cfg.parse('[checks."net.bandwidth"]\nisolation_timeout_s = 60\n', {"net.bandwidth": NetBandwidth}) \
        .timeout_for(NetBandwidth, 1024) == base
    assert cfg.parse('[checks."net.bandwidth"]\nisolation = "off"\n', {"net.bandwidth": NetBandwidth}) \
        .timeout_for(NetBandwidth, 1024) == base


@pytest.mark.parametrize("check_id,held,off", [("collectives.cluster", 120.0, {"pairwise": False}),
                                               ("scaling.multi_node", 180.0, {"isolation": "off"})])
def test_a_launch_based_pass_is_given_twenty_seconds_a_round_for_the_rounds_a_search_takes(check_id, held, off):
    """Each round of these passes is a torchrun launch (MIN_LAUNCH_S, 20 s, at least): the 120 s and
    180 s they had held 6 and 9 rounds, where a search takes 20-50 (pass_rounds)."""
    from preflight.launch.isolation_types import pass_rounds
    from preflight.launch.torchrun import MIN_LAUNCH_S

    check = discover().checks[check_id]
    config = cfg.load(None, {check_id: check})
    assert config.timeout_for(check, 2) == check.timeout_s
    for nodes in (8, 1024):
        assert config.timeout_for(check, nodes) == check.timeout_s + pass_rounds(nodes) * MIN_LAUNCH_S - held
    assert check.timeout_at(8, check.Params(**off)) == check.timeout_s


def test_a_levels_timeout_grows_by_the_pass_as_the_default_does_and_a_level_without_the_pass_does_not():
    checks = {c.id: c for c in discover().checks.values() if c.id in ("collectives.cluster", "net.bandwidth")}
    cluster, bandwidth = checks["collectives.cluster"], checks["net.bandwidth"]
    thorough = cfg.load(None, checks)
    thorough.level = "thorough"
    grown = cluster.timeout_at(8, cluster.Params()) - cluster.timeout_s
    assert grown > 0 and thorough.timeout_for(cluster, 8) == thorough.timeout_for(cluster) + grown  # 900 s + the pass
    assert thorough.timeout_for(bandwidth, 8) == thorough.timeout_for(bandwidth)  # the full matrix: no pass
    quick = cfg.load(None, checks)
    quick.level = "quick"
    assert quick.timeout_for(bandwidth, 1024) == quick.timeout_for(bandwidth) == 30  # isolation off at quick
