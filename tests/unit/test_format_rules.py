"""Format rules the real corpus (tests/data/real) has no sample of, each from the producing program's
own source: the line formats printed there, not outputs captured from a run."""

from __future__ import annotations

import json
import sys
import types

import pytest

from preflight_checks.gpu.rules import thermal_slowdown_text
from preflight.run.hosts import HostsFileError, nodes_from_arg, parse_hosts
from preflight_checks.collectives.nccl_tests import parse_json, parse_output
from preflight.integrations.slurm import parse_show_node
from preflight.launch.nccl_log import nccl_network


def test_nccl_23_names_its_network_with_using_internal_network():
    # NCCL 2.3 src/init.cu: INFO(INIT,"Using internal Network %s", ncclNetName()) (or "external"
    # for a plugin); 2.4 and 2.5 print neither, 2.6+ "Using network %s".
    found = nccl_network(["host:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
                          "host:1:1 [0] NCCL INFO Using internal Network IB"])
    assert found["network"] == "IB" and "Using internal Network IB" in found["evidence"]
    assert nccl_network(["h:1:1 [0] NCCL INFO Using external Network AWS Libfabric"])["network"] == "AWS Libfabric"


def test_a_channel_line_names_a_network_with_spaces_and_the_gdr_suffixes():
    # src/transport/net.cc: "... [send] via NET/%s/%d%s%s%s" with "/GDRDMA", "(PCI)", "/Shared".
    found = nccl_network(["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/AWS Libfabric/1/GDRDMA",
                          "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/IBext/0(1)/GDRDMA(PCI)/Shared"])
    assert found["network"] == "AWS Libfabric"
    assert found["via"] == ["NET/AWS Libfabric/1/GDRDMA", "NET/IBext/0(1)/GDRDMA(PCI)/Shared"]


def test_nccl_tests_json_output():
    # nccl-tests 2.19 src/util.cu writes -J FILE with results[] of size/count/type/redop/root and
    # out_of_place/in_place {time, alg_bw, bus_bw, nwrong}, then out_of_bounds and average_bus_bandwidth.
    doc = {"version": 3, "config": {"ngpus": 8},
           "results": [{"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": "    -1",
                        "out_of_place": {"time": 30.5, "alg_bw": 34.4, "bus_bw": 60.1, "nwrong": 0},
                        "in_place": {"time": 29.9, "alg_bw": 35.0, "bus_bw": 61.3, "nwrong": None}}],
           "out_of_bounds": {"count": 0, "okay": True}, "average_bus_bandwidth": {"bandwidth": 60.1, "okay": "unchecked"},
           "errors": []}
    parsed = parse_json(json.dumps(doc))
    (row,) = parsed["rows"]
    assert row["bytes"] == 1048576 and row["root"] == "-1" and row["out_of_place"]["busbw_gbps"] == 60.1
    assert row["out_of_place"]["wrong"] == 0 and row["in_place"]["wrong"] is None
    assert (parsed["n_gpus"], parsed["out_of_bounds"], parsed["avg_busbw_gbps"]) == (8, 0, 60.1)


def test_nccl_tests_per_iteration_columns_and_timestamps_are_read_by_the_header():
    # src/util.cu (2.19+, -I 1 -Z): i_min i_max i_p99 i_cv% after each half, a timestamp at the end.
    header = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max"
              "    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp")
    row = ("     1048576        262144     float     sum      -1    30.51   34.37   60.15       0    29.80    31.20    31.10"
           "     1.10    29.90   35.07   61.37       0    29.10    30.70    30.60     1.20  2026-07-09 10:11:12")
    (parsed_row,) = parse_output(header + "\n" + row)["rows"]
    assert parsed_row["in_place"]["busbw_gbps"] == 61.37 and parsed_row["in_place"]["i_p99_us"] == 30.6


def test_an_unreadable_table_row_is_reported_not_dropped():
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    parsed = parse_output(header + "\n     1048576        262144     float     sum      -1    30.51   34.37\n")
    assert parsed["rows"] == [] and parsed["unparsed"] == ["1048576        262144     float     sum      -1    30.51   34.37"]


def test_slurm_reason_ends_only_at_a_key_printed_after_it():
    # src/api/node_info.c: Reason=<text> [user@time], then Comment=, Extra=, InstanceId=, Topology=.
    record = ("NodeName=gpu01 Arch=x86_64 State=MIXED+DRAIN+PLANNED Partitions=gpu CfgTRES=cpu=8,gres/gpu=8 "
              "Reason=xid 79 on GPU 3: see ticket OPS=12 [root@2024-05-01T10:00:00] Comment=rack 4 "
              "Extra={\"rail\": 2} InstanceId=i-0abc Topology=leaf1:spine0")
    node = parse_show_node(record)["gpu01"]
    assert node.reason == "xid 79 on GPU 3: see ticket OPS=12" and node.drained
    assert (node.reason_user, node.reason_time) == ("root", "2024-05-01T10:00:00")
    assert node.fields["Comment"] == "rack 4" and node.fields["Extra"] == '{"rail": 2}'
    assert (node.fields["InstanceId"], node.fields["Topology"]) == ("i-0abc", "leaf1:spine0")


@pytest.mark.parametrize("margin, slowdown_tlimit, at", [
    (-2, -2, True),    # the margin nvidia-smi's "GPU Slowdown T.Limit Temp : -2 C" names: slowdown
    (-3, -2, True),
    (-1, -2, False),   # past the limit by 1 C, not yet at slowdown
    (55, -2, False),
    (0, None, True),   # without the field value, a margin of 0 is the slowdown point (NVML's definition)
    (1, None, False),
])
def test_thermal_margin_is_judged_as_a_margin(margin, slowdown_tlimit, at):
    gpu = {"temperature_c": 90, "temperature_margin_c": margin, "temperature_slowdown_tlimit_c": slowdown_tlimit,
           "temperature_slowdown_c": 87}  # the absolute threshold is not used when there is a margin
    assert bool(thermal_slowdown_text(gpu)) is at


def test_absolute_slowdown_threshold_is_the_fallback_without_a_margin():
    assert thermal_slowdown_text({"temperature_c": 98, "temperature_slowdown_c": 98})
    assert not thermal_slowdown_text({"temperature_c": 97, "temperature_slowdown_c": 98})


def test_nvml_margin_and_tlimit_field_values_are_recorded(monkeypatch):
    from tests.unit.checks.gpu.test_gpu_workers import _old_bindings
    from preflight.workers import gpu_nvml

    def field(value):
        return types.SimpleNamespace(valueType=5, nvmlReturn=0, value=types.SimpleNamespace(siVal=value))

    module = _old_bindings(nvmlDeviceGetMarginTemperature=lambda h: -2,
                           nvmlDeviceGetFieldValues=lambda h, ids: [field({194: -2, 193: -8}[i]) for i in ids])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    gpu = gpu_nvml.nvml_facts(throttle_samples=1)["gpus"][0]
    assert (gpu["temperature_margin_c"], gpu["temperature_slowdown_tlimit_c"], gpu["temperature_shutdown_tlimit_c"]) == (-2, -2, -8)
    assert gpu["errors"] == {}


def test_nodes_from_arg_reads_a_node_set_or_a_file(tmp_path):
    assert [h.name for h in nodes_from_arg("gpu[001-003,070]")] == ["gpu001", "gpu002", "gpu003", "gpu070"]
    assert len(nodes_from_arg("rack[1-2]-gpu[01-08]")) == 16
    hosts = tmp_path / "gpu[01-02]"  # a file of that name wins over the node set
    hosts.write_text("other01\n")
    assert [h.name for h in nodes_from_arg(str(hosts))] == ["other01"]
    for bad in ("-oProxyCommand=sh", "gpu[01-02];reboot", "$(reboot)", "gpu[01-02] slots=x", ""):
        with pytest.raises(HostsFileError):
            nodes_from_arg(bad)


def test_a_hosts_line_may_hold_several_node_sets():
    assert [h.name for h in parse_hosts("d[001-002],f[007,009] slots=8\n")] == ["d001", "d002", "f007", "f009"]


def test_no_net_plugin_initialised_is_no_network_not_a_plugin_name():
    # NCCL src/plugin/net.cc: INFO "Failed to initialize NET plugin %s" per plugin (a name may hold a
    # space), then WARN("Failed to initialize any NET plugin") and ncclInvalidUsage; torch repeats the
    # last line after "Last error:" without NCCL's head.
    lines = ["h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
             "h:1:1 [0] NCCL INFO NET/gIB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>",
             "h:1:1 [0] NCCL INFO Failed to initialize NET plugin AWS Libfabric",
             "h:1:1 [0] NCCL INFO Failed to initialize NET plugin gIB",
             "h:1:1 [0] NCCL WARN Failed to initialize any NET plugin",
             "Last error:", "Failed to initialize any NET plugin"]
    found = nccl_network(lines)
    assert found["network"] is None and found["no_network"] is True
    assert any("any NET plugin" in line for line in found["unrecognised"])
    assert nccl_network(lines[-1:])["no_network"] is True  # torch's error alone says it too


def test_merged_nics_list_their_link_layers():
    # NCCL 2.19 net_ib.cc (and nccl-rdma-sharp-plugins p2p_plugin.c): a merged device prints as
    # " [%d]={[%d] %s:%d/%s, ...}", a space after each member's index.
    line = ("h:1:1 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} [1]mlx5_2:1/IB [RO]; "
            "OOB eth0:10.0.0.1<0>")
    found = nccl_network([line])
    assert found["network"] == "IB" and found["link_layers"] == ["RoCE", "IB"]


def test_nccl_lines_without_their_info_head_are_read():
    # The message NCCL logs after "host:pid:tid [dev] NCCL INFO ", as docs and tickets quote it.
    found = nccl_network(["NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>",
                          "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA"])
    assert found["network"] == "IB" and found["link_layers"] == ["IB", "RoCE"]
    assert found["via"] == ["NET/IB/0/GDRDMA"]
    assert nccl_network(["host:12:34 [3] Using network Socket"])["network"] == "Socket"
    assert nccl_network(["NET/AWS Libfabric : Using [0]rdmap0s0"])["network"] == "AWS Libfabric"
    assert nccl_network(["training step 12, loss 0.3 (NET/IB was fine)"]) is None


def test_slurm_json_node_state_as_a_list_or_a_string_with_flags():
    # Slurm 23.02+ data_parser writes "state": ["MIXED", "DRAIN"] and reason_changed_at as
    # {"set": true, "number": N}; 21.08 (openapi/v0.0.37) "state": "mixed", "state_flags": ["DRAIN"].
    from preflight.integrations.slurm_json import node_states

    new = {"nodes": [{"name": "g1", "state": ["MIXED", "DRAIN"], "reason": "preflight: xid 79",
                      "reason_set_by_user": "root", "reason_changed_at": {"set": True, "number": 1700000000}}]}
    old = {"nodes": [{"name": "g1", "state": "mixed", "state_flags": ["DRAIN"], "reason": "preflight: xid 79"}]}
    for doc in (new, old):
        node = node_states(json.dumps(doc))["g1"]
        assert node.state == "MIXED+DRAIN" and node.drained_by_preflight
    assert node_states(json.dumps(new))["g1"].reason_time == "1700000000"


def test_sacct_and_squeue_json_job_states_in_either_shape():
    # Slurm 23.02+ data_parser: squeue --json "job_state": ["RUNNING"], sacct --json "state":
    # {"current": ["COMPLETED"], "reason": "None"}; 21.08 (openapi/v0.0.37) "job_state": "RUNNING".
    from preflight.integrations.slurm_json import jobs

    doc = {"jobs": [{"job_id": 1, "name": "a", "user_name": "u", "partition": "p", "job_state": ["RUNNING"],
                     "nodes": "gpu[1-2]"},
                    {"job_id": 2, "name": "b", "user": "u", "partition": "p",
                     "state": {"current": ["FAILED"], "reason": "NonZeroExitCode"}, "nodes": "gpu3"},
                    {"job_id": 3, "job_state": "PENDING", "state_reason": "Priority"}]}
    found = jobs(json.dumps(doc))
    assert [(j["id"], j["state"]) for j in found] == [(1, "RUNNING"), (2, "FAILED"), (3, "PENDING")]
    assert found[2]["reason"] == "Priority" and found[0]["nodes"] == "gpu[1-2]"


def test_squeue_reason_with_blanks_and_commas_stays_in_its_column():
    # src/common/slurm_protocol_defs.c job_state_reason_string(): WAIT_NODE_NOT_AVAIL is
    # "ReqNodeNotAvail", WAIT_PART_NODE_LIMIT-style reasons are sentences such as "Nodes required for
    # job are DOWN, DRAINED or reserved for jobs in higher priority partitions"; squeue's %R prints
    # either in parentheses, and ", UnavailableNodes:<nodes>" follows ReqNodeNotAvail.
    from preflight.integrations.slurm_tables import squeue_jobs

    text = ("JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
            "   10    gpu     train   alice PD       0:00      4 (Nodes required for job are DOWN, DRAINED or "
            "reserved for jobs in higher priority partitions)\n"
            "   11    gpu  my run     bob   PD       0:00      2 (ReqNodeNotAvail, UnavailableNodes:gpu[01-02])\n"
            "   12    gpu     eval   alice  R       1:02      1 gpu03\n")
    jobs = squeue_jobs(text)
    assert [j["reason"] for j in jobs] == [
        "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions",
        "ReqNodeNotAvail, UnavailableNodes:gpu[01-02]", ""]
    assert [(j["name"], j["user"], j["state"], j["nodes"]) for j in jobs] == [
        ("train", "alice", "PD", ""), ("my run", "bob", "PD", ""), ("eval", "alice", "R", "gpu03")]


@pytest.mark.parametrize("prefix", [
    "[0] ",                                   # MPICH hydra and Intel MPI: mpiexec -l / -prepend-rank
    "[1,0]<stdout>:",                         # Open MPI 4 mpirun --tag-output
    "[1,0]<stdout>: ",                        # Open MPI 5 (PRRTE) --output tag
    "[prterun-node1-4242@1,0]<stdout>: ",     # PRRTE --output tag-fullname
    "[1,0][node1:4242]<stdout>: ",            # PRRTE --output tag-detailed
    "Mon Jan 13 10:00:00 2025[1,0]<stdout>:",  # Open MPI 4 --timestamp-output with --tag-output
    "0: [1,0]<stdout>:",                      # srun --label around an mpirun
])
def test_nccl_tests_rows_tagged_by_a_launcher_are_read(prefix):
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    rows = ["   268435456      67108864     float     sum      -1   9093.4   29.52   29.52      0   9104.3   29.48   29.48      0",
            "   536870912     134217728     float     sum      -1   101201    5.30    5.30      0   101150    5.31    5.31      0"]
    text = "\n".join(prefix + line for line in [header, *rows, "# Avg bus bandwidth    : 17.4"])
    parsed = parse_output(text)
    assert [r["out_of_place"]["busbw_gbps"] for r in parsed["rows"]] == [29.52, 5.30]
    assert parsed["avg_busbw_gbps"] == 17.4 and not parsed["unparsed"]


def test_torchrun_output_cut_inside_its_traceback_names_no_source_line_as_the_error():
    # Python prints each frame as `  File "<path>", line N, in <function>` and its source line under it;
    # torch/distributed/run.py's run() calls `elastic_launch(` over several lines, so a capture cut
    # before the ChildFailedError summary ends on that source line.
    from preflight.launch.torchrun_log import summarize_agent

    stderr = "\n".join([
        "E0325 20:57:27.620000 2606 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python",
        "Traceback (most recent call last):",
        '  File "/root/miniconda3/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        '  File "/root/miniconda3/lib/python3.12/site-packages/torch/distributed/run.py", line 910, in run',
        "    elastic_launch("])
    assert summarize_agent([], stderr, 1, False, 1.0)["last_error"] == "worker local rank 5 failed: exit code -9 (SIGKILL)"
    error = summarize_agent([], stderr.split("\n", 1)[1], 1, False, 1.0)["last_error"]  # without the agent's line
    assert "elastic_launch(" not in error and "ends inside a traceback" in error
    assert "torch/distributed/run.py, line 910, in run" in error


def test_pixi_lock_version_6_names_conda_packages_by_their_file_and_pypi_packages_by_name(tmp_path):
    # rattler_lock (pixi's lock writer) version 6: a conda package is `- conda: <url>` whose file name is
    # name-version-build; a PyPI one `- pypi: <url>` with `name:` and `version:`; `purls:` maps a conda
    # package to its PyPI name (none for a library that is no Python distribution).
    from preflight_checks.versions.pins import read_requirements

    lock = tmp_path / "pixi.lock"
    lock.write_text("version: 6\npackages:\n"
                    "- conda: https://conda.example/conda-forge/linux-64/pytorch-2.7.1-cuda126_mkl_py312_h30b5a27_300.conda\n"
                    "  sha256: 0000\n  purls:\n  - pkg:pypi/torch?source=hash-mapping\n"
                    "- conda: https://conda.example/conda-forge/linux-64/libgcc-15.1.0-h767d61c_2.conda\n"
                    "  purls: []\n"
                    "- pypi: https://files.example/packages/aa/bb/wandb-0.21.0-py3-none-any.whl\n"
                    "  name: wandb\n  version: 0.21.0\n")
    entries = read_requirements([str(lock)])["entries"]
    assert [(e["name"], e["specifier"], e["optional"], e["where"].rsplit(":", 1)[1]) for e in entries] == [
        ("torch", "==2.7.1", "conda", "6"), ("wandb", "==0.21.0", None, "10")]
