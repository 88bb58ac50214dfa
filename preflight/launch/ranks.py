"""Start N ranks of a worker program on this node and collect what they print, under one deadline.

The local checks (collectives.local, scaling.multi_gpu) start their ranks here; the cluster checks
start the same worker programs with torchrun on every node instead. The environment each rank gets is
the one torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), so a worker does not know or care which of the two started it.

Rules this module keeps:
- argv lists only, never a shell;
- rank 0's rendezvous port is bound here, on 127.0.0.1 port 0, and its listening socket is handed to
  rank 0 (--store-fd), so no other program on the machine can take the port between picking and use;
- once one rank has ended, the others get `grace_s` to end by themselves (they see the broken
  process group), then every rank still alive is killed with any children it started (through
  preflight.transport.process, the one layer that starts and stops processes);
- at the deadline every rank still alive is killed the same way. Nothing this module started outlives
  `launch_local`.
"""

from __future__ import annotations

import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from preflight.transport.module_argv import isolated_module_argv
from preflight.transport.process import RemoteProcess
from preflight.core.jsonlines import last_json
from preflight.transport.local import LocalTransport

LOOPBACK = "127.0.0.1"
POLL_S = 0.05


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (bound to port 0, then released).

    Prefer `listening_socket`, which keeps the port; this is for callers that must name a port for a
    program that binds it itself (torchrun's rendezvous endpoint).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def listening_socket(host: str = LOOPBACK) -> socket.socket:
    """A socket listening on a fresh port of `host`, inheritable so a child can serve on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


def loopback_interface() -> str:
    """The name of the interface that carries 127.0.0.1 ('lo' on Linux)."""
    try:
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(getattr(a, "address", None) == LOOPBACK for a in addresses):
                return name
    except Exception:  # noqa: BLE001 - fall back to the Linux name
        pass
    return "lo"


@dataclass
class RankRun:
    rank: int
    pid: int
    argv: list[str]
    env: dict[str, str]  # only what the launcher set for this rank, for the evidence
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    killed: bool = False  # ended by the launcher (deadline passed, or another rank failed)
    duration_s: float = 0.0

    @property
    def command_line(self) -> str:
        """The rank's command as one line a person can paste into a shell to reproduce it."""
        settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{settings} {shlex.join(self.argv)}".strip()

    def last_json(self) -> dict[str, Any] | None:
        return last_json(self.stdout)


@dataclass
class LaunchResult:
    ranks: list[RankRun]
    master_addr: str
    master_port: int
    timed_out: bool = False
    timeout_s: float = 0.0
    duration_s: float = 0.0
    killed_pids: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(r.returncode == 0 for r in self.ranks)

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.ranks]

    def summary(self) -> dict[str, Any]:
        """JSON-able account of the launch for a check's facts."""
        return {
            "world_size": len(self.ranks),
            "master": f"{self.master_addr}:{self.master_port}",
            "timed_out": self.timed_out,
            "timeout_s": round(self.timeout_s, 1),
            "duration_s": round(self.duration_s, 2),
            "ranks": [
                {"rank": r.rank, "pid": r.pid, "returncode": r.returncode, "killed": r.killed,
                 "duration_s": round(r.duration_s, 2)}
                for r in self.ranks
            ],
        }


def launch_local(
    argv: list[str],
    world_size: int,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    rank_argv: Callable[[int], list[str]] | None = None,
    grace_s: float = 10.0,
    master_addr: str = LOOPBACK,
    cwd: str | None = None,
) -> LaunchResult:
    """Run `argv` as ranks 0..world_size-1 on this node and wait for all of them, at most `timeout_s`.

    `argv` must accept `--store-fd N` (rank 0 serves the rendezvous store on that inherited socket).
    `rank_argv(rank)` adds arguments for one rank (fault injection in tests). `env` is added to the
    inherited environment of every rank.
    """
    if world_size < 1:
        raise ValueError("world_size must be at least 1")
    listener = listening_socket(master_addr)
    port = listener.getsockname()[1]
    here = LocalTransport()
    ranks: list[RankRun] = []
    procs: list[RemoteProcess] = []
    start = time.monotonic()
    deadline = start + timeout_s
    result = LaunchResult(ranks=ranks, master_addr=master_addr, master_port=port, timeout_s=timeout_s)
    try:
        for rank in range(world_size):
            rank_env = {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
                "GROUP_RANK": "0",
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(port),
                **(env or {}),
            }
            full_argv = list(argv) + (rank_argv(rank) if rank_argv else [])
            pass_fds: tuple[int, ...] = ()
            if rank == 0:
                full_argv += ["--store-fd", str(listener.fileno())]
                pass_fds = (listener.fileno(),)
            proc = here.spawn(full_argv, guard=False, env=rank_env, cwd=cwd, pass_fds=pass_fds)
            procs.append(proc)
            ranks.append(RankRun(rank=rank, pid=proc.pid, argv=full_argv, env=rank_env))
        # Rank 0 holds its own copy of the listening socket now; ours must not keep the port alive.
        listener.close()
        _wait_all(procs, ranks, result, deadline, grace_s, start)
    finally:
        listener.close()
        for rank_run, proc in zip(ranks, procs):
            if proc.running():
                proc.stop(hard=True)
                rank_run.killed = proc.stopped
                result.killed_pids.append(proc.pid)
            proc.join()
            rank_run.returncode = proc.returncode
            rank_run.stdout = "\n".join(proc.lines) + ("\n" if proc.lines else "")
            rank_run.stderr = proc.stderr
        result.duration_s = time.monotonic() - start
    return result


def _wait_all(procs: list[RemoteProcess], ranks: list[RankRun], result: LaunchResult, deadline: float,
              grace_s: float, start: float) -> None:
    first_exit: float | None = None
    while True:
        now = time.monotonic()
        running = []
        for proc, rank_run in zip(procs, ranks):
            if proc.running():
                running.append((proc, rank_run))
            elif not rank_run.duration_s:
                rank_run.duration_s = now - start
                rank_run.returncode = proc.returncode
                first_exit = first_exit or now
        if not running:
            return
        grace_over = first_exit is not None and now >= first_exit + grace_s
        if now >= deadline or grace_over:
            result.timed_out = now >= deadline
            for proc, rank_run in running:
                proc.stop(hard=True)
                rank_run.killed = proc.stopped
                result.killed_pids.append(proc.pid)
                rank_run.returncode = proc.returncode
                rank_run.duration_s = time.monotonic() - start
            return
        time.sleep(POLL_S)


def interpret_launch(launch: LaunchResult) -> dict[str, Any]:
    """What the ranks printed, read by the worker protocol (preflight.workers.process_group).

    Returns JSON-able facts: ok, result (rank 0's JSON without "ok"), error (a sentence naming the
    ranks at fault), missing_ranks, and the launch summary with every PID.
    """
    outcome: dict[str, Any] = {"launch": launch.summary(), "ok": False, "error": None, "missing_ranks": [],
                               "result": None}
    reports = {r.rank: r.last_json() for r in launch.ranks}
    head = reports.get(0)
    if launch.ok and head and head.get("ok"):
        outcome["ok"] = True
        outcome["result"] = {k: v for k, v in head.items() if k != "ok"}
        return outcome
    missing = sorted({m for rep in reports.values() if rep for m in rep.get("missing_ranks", [])})
    errors = [(rank, rep["error"]) for rank, rep in sorted(reports.items()) if rep and not rep.get("ok") and rep.get("error")]
    outcome["missing_ranks"] = missing
    outcome["error"] = _launch_error(launch, reports, missing, errors)
    return outcome


def _ranks_text(ranks: list[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))}"


def _launch_error(launch: LaunchResult, reports: dict[int, dict[str, Any] | None], missing: list[int],
                  errors: list[tuple[int, str]]) -> str:
    """The sentence naming the ranks at fault in a launch that did not succeed."""
    if missing:
        # The rank that noticed says who and for how long; its words are the clearest account.
        return next((text for _, text in errors if "never joined" in text), f"{_ranks_text(missing)} never joined")
    # Ranks that joined, went silent while the others failed waiting for them, and were killed.
    stopped = [r.rank for r in launch.ranks if r.killed and not reports.get(r.rank)]
    if errors and stopped:
        rank, text = errors[0]
        return (f"{_ranks_text(stopped)} stopped inside a collective: reported nothing "
                f"and killed, while the others failed waiting (rank {rank}: {text})")
    if errors:
        return "; ".join(f"rank {rank}: {text}" for rank, text in errors)
    if launch.timed_out:
        stuck = [r.rank for r in launch.ranks if r.killed]
        return (f"{_ranks_text(stuck)} still running after {launch.timeout_s:.0f}s "
                "and killed (no rank reported an error)")
    failed = [r for r in launch.ranks if r.returncode != 0 and not r.killed]
    if not failed:
        return "rank 0 printed no result"
    first = failed[0]
    tail = (first.stderr.strip().splitlines() or ["no output"])[-1]
    return f"rank {first.rank} exited with code {first.returncode}: {tail}"


def worker_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """`python -m preflight.workers.<module> args...` with this interpreter (a venv is honoured), its
    imports never from the directory it runs in (see preflight.transport.module_argv.isolated_module_argv)."""
    return isolated_module_argv(f"preflight.workers.{module}", *args, python=python)
