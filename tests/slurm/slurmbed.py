"""A real Slurm cluster on this machine, on top of the namespace test bed (tests/cluster/testbed.py).

    host namespace                                   node namespaces (one per node)
    munged  (one socket file serves every node)      slurmd n1  198.18.0.B+11, hostname n1
    slurmctld on the bridge address 198.18.0.B+1      slurmd n2  198.18.0.B+12, hostname n2 ...

Each slurmd runs with `nsenter --net=/run/netns/X` (not `ip netns exec`, which remounts /sys and
hides the cgroup tree slurmd reads) inside `unshare --uts --mount`, where it sets its own hostname
and bind-mounts a private /etc/hosts (every node and the controller by name) and an
/etc/resolv.conf that points at 127.0.0.1 (the machine's resolver cannot be reached from a
namespace, and lookups would hang 10 s each). Jobs and steps inherit all of that, so a task on n2
sees hostname n2, n2's address and n2's mounts: a node can get its own small /dev/shm.

Everything lives in one directory and is found through SLURM_CONF (no /etc/slurm is touched);
ports are picked free at start. `stop()` ends every process it started (by PID), also after a
failed start. Needs root and Debian's slurm-wlm and munge (Slurm 22.05).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from preflight.integrations.slurm import NodeState, parse_show_node
from tests.cluster.testbed import TestBed, _kill_pids, _netns_pids, _run, unavailable_reason
from tests.nvml.standin import OVERLAY_LIBS, SYSTEM_LIBRARY_DIR

SLURM_BINARIES = ("slurmctld", "slurmd", "srun", "salloc", "sbatch", "scontrol", "sinfo", "munged", "nsenter", "unshare")
PARTITION = "pft"


def slurm_unavailable_reason() -> str | None:
    """Why no Slurm test bed can be built here, or None when one can."""
    reason = unavailable_reason()
    if reason:
        return reason
    for binary in SLURM_BINARIES:
        if shutil.which(binary) is None and not os.path.exists(f"/usr/sbin/{binary}"):
            return f"{binary} is not installed (apt-get install slurm-wlm munge)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


@dataclass
class SlurmBed(TestBed):
    """`with SlurmBed(3, shm={2: "16m"}) as bed:` a 3-node Slurm cluster, node 2 with a 16 MiB /dev/shm.

    Each node keeps the test bed's sshd too, so the SSH path can be compared on the same namespaces."""

    __test__ = False

    # Node index -> size of a private tmpfs mounted on /dev/shm for that node's slurmd and its jobs.
    shm: dict[int, str] = field(default_factory=dict)
    cpus: int = 2
    slurmd_timeout: int = 300  # seconds before slurmctld declares a silent node DOWN
    extra_conf: str = ""  # slurm.conf lines to add (a HealthCheckProgram)
    # Node index -> a directory of libraries laid over the system library directory for that node's
    # slurmd and all it starts (an overlay in its mount namespace): the stand-in NVML library on one
    # node, found as a driver installed there is, by the loader's own search, whatever the environment.
    node_libs: dict[int, Path] = field(default_factory=dict)
    link_conf: Path | None = None  # a symlink to make to slurm.conf (for programs slurmd starts)
    sdir: Path = field(init=False)
    conf: Path = field(init=False)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)

    def start(self) -> None:
        super().start()
        assert self.dir is not None
        self.sdir = self.dir / "slurm"
        self.sdir.mkdir()
        self.cluster = self.tag  # also a unique ClusterName
        self._start_munged()
        self.ctld_port, self.slurmd_port = _free_port(), _free_port()
        self.conf = self.sdir / "slurm.conf"
        self.conf.write_text(self.slurm_conf())
        if self.link_conf is not None:
            self.link_conf.symlink_to(self.conf)
        (self.sdir / "ctld").mkdir()
        hosts = "127.0.0.1 localhost\n" + f"{self.bridge_address} {self.controller}\n" + "".join(
            f"{node.address} {node.name}\n" for node in self.nodes)
        (self.sdir / "hosts").write_text(hosts)
        (self.sdir / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        self._start("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for node in self.nodes:
            self.start_slurmd(node.index)
        self.wait_idle()

    def stop(self) -> None:
        """End every process this bed started, then the namespaces; each step on its own."""
        with contextlib.suppress(Exception):
            for node in self.nodes:
                _kill_pids(_netns_pids(node.netns), grace_s=3.0)
        for name in sorted(self._procs, key=lambda n: n == "munged"):  # munged last
            proc = self._procs[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        self._procs.clear()
        super().stop()

    # -- pieces --------------------------------------------------------------------------------

    @property
    def controller(self) -> str:
        return socket.gethostname()

    @property
    def munge_socket(self) -> Path:
        return self.sdir / "munge" / "munge.socket"

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.sdir / f"{name}.out", "wb")  # noqa: SIM115 - the child holds it
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()
        self._procs[name] = proc
        return proc

    def _start_munged(self) -> None:
        munge = self.sdir / "munge"
        munge.mkdir()
        os.chmod(munge, 0o755)  # slurmd and the tools (any user) must reach the socket
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self._start("munged", [_binary("munged"), "-F", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), 10, "munged did not create its socket")

    def slurm_conf(self) -> str:
        nodes = "".join(
            f"NodeName={n.name} NodeAddr={n.address} NodeHostname={n.name} CPUs={self.cpus} "
            f"RealMemory=1000 State=UNKNOWN\n" for n in self.nodes)
        d = self.sdir
        return (
            f"ClusterName={self.cluster}\n"
            f"SlurmctldHost={self.controller}({self.bridge_address})\n"
            f"SlurmctldPort={self.ctld_port}\nSlurmdPort={self.slurmd_port}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={self.munge_socket}\n"
            f"StateSaveLocation={d / 'ctld'}\nSlurmdSpoolDir={d / 'spool' / '%n'}\n"
            f"SlurmctldPidFile={d / 'slurmctld.pid'}\nSlurmdPidFile={d / 'slurmd-%n.pid'}\n"
            f"SlurmctldLogFile={d / 'slurmctld.log'}\nSlurmdLogFile={d / 'slurmd-%n.log'}\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "SlurmdParameters=config_overrides\nSchedulerParameters=batch_sched_delay=0\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
            "ReturnToService=2\nMpiDefault=none\nSwitchType=switch/none\n"
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            f"SlurmdTimeout={self.slurmd_timeout}\nMessageTimeout=10\nKillWait=5\nInactiveLimit=0\n"
            + self.extra_conf.rstrip("\n") + "\n"
            + nodes
            + f"PartitionName={PARTITION} Nodes={','.join(n.name for n in self.nodes)} Default=YES "
              "MaxTime=INFINITE State=UP\n"
        )

    def start_slurmd(self, index: int) -> None:
        node = self.node(index)
        (self.sdir / "spool" / node.name).mkdir(parents=True, exist_ok=True)
        shm = self.shm.get(index)
        script = (
            'hostname "$NODE" && mount --bind "$DIR/hosts" /etc/hosts && '
            'mount --bind "$DIR/resolv.conf" /etc/resolv.conf && '
            + ('mount -t tmpfs -o "size=$SHM,mode=1777" pft-shm /dev/shm && ' if shm else "")
            + (OVERLAY_LIBS if self.node_libs.get(index) else "")
            + 'exec "$@"'
        )
        argv = ["nsenter", f"--net=/run/netns/{node.netns}", "unshare", "--uts", "--mount",
                "env", f"NODE={node.name}", f"DIR={self.sdir}", f"SHM={shm or ''}",
                f"LIBS={self.node_libs.get(index) or ''}", f"SYSLIB={SYSTEM_LIBRARY_DIR}",
                "sh", "-c", script, "sh", _binary("slurmd"), "-D", "-f", str(self.conf), "-N", node.name]
        self._start(f"slurmd-{node.name}", argv)

    def grow_shm(self, index: int, size: str) -> None:
        """Remount the node's private /dev/shm at `size`: the operator fixed the node."""
        proc = self._procs[f"slurmd-{self.node(index).name}"]
        _run(["nsenter", f"--target={proc.pid}", "--mount", "mount", "-o", f"remount,size={size}", "/dev/shm"])

    def kill_slurmd(self, index: int) -> None:
        """The node's slurmd (and anything it runs) goes away; the controller still counts it allocated."""
        node = self.node(index)
        proc = self._procs.pop(f"slurmd-{node.name}", None)
        _kill_pids(_netns_pids(node.netns), grace_s=0.0)
        if proc is not None:
            proc.wait(timeout=10)

    # -- talking to it -------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The environment a user of this cluster has: SLURM_CONF, and no allocation of the caller's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def scontrol(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=self.env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def states(self) -> dict[str, NodeState]:
        """Node name -> state and drain reason, read as preflight reads them."""
        return parse_show_node(self.scontrol("show", "node", "-o").stdout)

    def wait_idle(self, timeout: float = 120.0, names: list[str] | None = None) -> None:
        # Generous: a slurmd runs the bed's HealthCheckProgram (a preflight run) before it answers, and on a
        # loaded machine the controller's first ping times out (MessageTimeout) and the node registers ~30 s in.
        wanted = names or [n.name for n in self.nodes]

        def ready() -> bool:
            try:
                states = self.states()
            except (RuntimeError, subprocess.TimeoutExpired):
                return False
            # Registered and answering; a node drained at start (by a health check) counts too.
            return all(name in states and states[name].state.split("+")[0] == "IDLE"
                       and "NOT_RESPONDING" not in states[name].state and "*" not in states[name].state
                       for name in wanted)

        self._wait(ready, timeout, f"nodes {wanted} did not become idle")

    def allocate(self, count: int, timeout: float = 60, *options: str) -> dict[str, str]:
        """Hold a `count`-node allocation (salloc --no-shell) and return the environment of a
        program running inside it, as salloc and sbatch set it: SLURM_JOB_ID, SLURM_JOB_NODELIST."""
        proc = subprocess.run(["salloc", f"-N{count}", "--no-shell", "-J", "pft-alloc", *options], capture_output=True,
                              text=True, env=self.env, timeout=timeout, stdin=subprocess.DEVNULL)
        match = re.search(r"Granted job allocation (\d+)", proc.stderr)
        if proc.returncode != 0 or not match:
            raise RuntimeError(f"salloc -N{count} failed ({proc.returncode}): {proc.stderr}\n{self.logs()}")
        jobid = match.group(1)
        nodelist = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%N"], capture_output=True, text=True,
                                  env=self.env, timeout=30, stdin=subprocess.DEVNULL).stdout.strip()
        return {**self.env, "SLURM_JOB_ID": jobid, "SLURM_JOB_NODELIST": nodelist}

    def release(self, jobid: str) -> None:
        subprocess.run(["scancel", jobid], capture_output=True, env=self.env, timeout=30, stdin=subprocess.DEVNULL)

    def srun_processes(self, jobid: str) -> list[str]:
        """srun processes on this side still working for the job: what a run left behind here."""
        import psutil

        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if cmdline and os.path.basename(cmdline[0]) == "srun" and f"--jobid={jobid}" in cmdline:
                with contextlib.suppress(psutil.Error):
                    if proc.environ().get("SLURM_CONF") == str(self.conf):  # job ids restart in every bed
                        found.append(" ".join(cmdline))
        return found

    def drain(self, name: str, reason: str) -> None:
        self.scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self.scontrol("update", f"NodeName={name}", "State=RESUME")

    def jobs(self) -> list[str]:
        proc = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, env=self.env,
                              timeout=30, stdin=subprocess.DEVNULL)
        return [line for line in proc.stdout.splitlines() if line.strip()]

    def jobs_left(self, settle_s: float = 30.0) -> list[str]:
        """The jobs still listed after a job ended, once a job listed as COMPLETING (salloc and sbatch can
        return while Slurm still ends the job's steps) has had `settle_s` to be gone."""
        deadline = time.monotonic() + settle_s
        listed = self.jobs()
        while listed and all(line.endswith("COMPLETING") for line in listed) and time.monotonic() < deadline:
            time.sleep(0.5)
            listed = self.jobs()
        return listed

    def leftovers(self, index: int) -> list[tuple[int, str]]:
        """Processes in the node's namespace other than its slurmd and sshd: what a job or step left behind."""
        slurmd = self._procs.get(f"slurmd-{self.node(index).name}")
        return [(pid, cmd) for pid, cmd in self.processes(self.node(index))
                if not (cmd.startswith((_binary("slurmd"), "sshd")) or (slurmd and pid == slurmd.pid))]

    def logs(self) -> str:
        """The tails of every daemon's log, for a failing test's message."""
        parts = []
        for path in sorted(self.sdir.glob("*.log")) + sorted(self.sdir.glob("*.out")):
            with contextlib.suppress(OSError):
                parts.append(f"== {path.name}\n{path.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def _wait(self, ready: Callable[[], bool], timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [name for name, proc in self._procs.items() if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"{message}: {', '.join(dead)} exited\n{self.logs()}")
            time.sleep(0.05)
        raise RuntimeError(f"{message} within {timeout:.0f}s\n{self.logs()}")

