"""What every distributed worker program shares: who am I, who else is here, one JSON line out.

A worker is started either by `preflight.launch.ranks.launch_local` (the node checks) or by torchrun (the
cluster checks). Both set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
explicit arguments override them.

Before any process group is made, the ranks hold a roll call on a TCPStore: every rank writes its name,
rank 0 waits up to --join-timeout-s and then either lets everyone go on or tells everyone which ranks
never came. That way "rank 3 never joined" is an answer with a rank in it, instead of a collective that
hangs until something kills it. Process groups get --pg-timeout-s, which the caller keeps shorter than
its own deadline.

Output protocol: rank 0 prints exactly one JSON object on stdout when it succeeds (`"ok": true`).
Any rank that fails prints one JSON object with `"ok": false`, its `"rank"`, an `"error"` text and, when
ranks are missing, `"missing_ranks"`; it then exits with status 1. Everything else goes to stderr.

Fault injection, for tests only: `--absent-rank K` makes rank K stay alive without ever joining
(it sleeps until it is killed), which is how a hung or unreachable rank looks to the others; the
environment variable PREFLIGHT_FAULT_STOP_IN_COLLECTIVE=K makes rank K join and then stop inside
its first all_reduce.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from preflight.workers import wire

PR_SET_PDEATHSIG = 1
ROLL_CALL_POLL_S = 0.1


class RanksMissing(Exception):
    def __init__(self, missing: list[int], message: str) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    store_fd: int | None = None


def import_team_module(name: str) -> Any:
    """Import the team's own module (a canary entry, a scaling workload), also from the working directory.

    The ranks start without the working directory on their import path, so that nothing there stands
    in for torch (preflight.transport.module_argv.isolated_module_argv). The team's module may live
    there all the same: the directory is searched last, after everything installed."""
    import importlib

    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    return importlib.import_module(name)


def add_dist_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("process group (defaults from the torchrun environment)")
    group.add_argument("--rank", type=int, default=None)
    group.add_argument("--world-size", type=int, default=None)
    group.add_argument("--local-rank", type=int, default=None)
    group.add_argument("--master-addr", default=None)
    group.add_argument("--master-port", type=int, default=None)
    group.add_argument("--store-fd", type=int, default=None,
                       help="rank 0 only: an inherited listening socket to serve the store on")
    group.add_argument("--join-timeout-s", type=float, default=60.0,
                       help="how long rank 0 waits for every rank to report in")
    group.add_argument("--pg-timeout-s", type=float, default=60.0,
                       help="timeout given to init_process_group (collectives fail after it)")
    group.add_argument("--absent-rank", type=int, default=None,
                       help="fault injection for tests: this rank never joins (sleeps until killed)")


def dist_env_from(args: argparse.Namespace) -> DistEnv:
    def pick(value: Any, name: str, default: Any = None) -> Any:
        if value is not None:
            return value
        if name in os.environ:
            return os.environ[name]
        if default is None:
            raise SystemExit(f"{name} is not set and was not given as an argument")
        return default

    rank = int(pick(args.rank, "RANK"))
    world_size = int(pick(args.world_size, "WORLD_SIZE"))
    return DistEnv(
        rank=rank,
        world_size=world_size,
        local_rank=int(pick(args.local_rank, "LOCAL_RANK", rank)),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", world_size)),
        master_addr=str(pick(args.master_addr, "MASTER_ADDR", "127.0.0.1")),
        master_port=int(pick(args.master_port, "MASTER_PORT")),
        store_fd=args.store_fd,
    )


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when its launcher dies, so no rank outlives a killed check."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before prctl took effect
        os._exit(1)


def hang_if_absent(env: DistEnv, absent_rank: int | None) -> None:
    if absent_rank is not None and absent_rank == env.rank:
        print(f"rank {env.rank}: fault injection, not joining", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)


def _store_prefix(tag: str) -> str:
    # Under torchrun the agent's store outlives one attempt; keep each attempt's keys apart.
    run = os.environ.get("TORCHELASTIC_RUN_ID", "local")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"preflight/{tag}/{run}/{attempt}"


def open_store(env: DistEnv, timeout_s: float, tag: str) -> Any:
    """The TCPStore every rank meets on, wrapped in a prefix for this program."""
    import torch.distributed as dist

    timeout = dt.timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        if env.rank == 0 and not agent_store:
            kwargs: dict[str, Any] = {"wait_for_workers": False}
            if env.store_fd is not None:
                kwargs["master_listen_fd"] = env.store_fd
            store = dist.TCPStore(env.master_addr, env.master_port, None, True, timeout, **kwargs)
        else:
            store = dist.TCPStore(env.master_addr, env.master_port, None, False, timeout)
    except Exception as exc:  # noqa: BLE001 - turned into a statement about rank 0
        if env.rank == 0 and not agent_store:
            raise RuntimeError(f"rank 0 could not serve the store on {env.master_addr}:{env.master_port}: {exc}") from exc
        raise RanksMissing(
            [0], f"rank {env.rank} could not reach rank 0's store at {env.master_addr}:{env.master_port} "
                 f"within {timeout_s:.0f}s: rank 0 never came up ({_first_line(exc)})",
        ) from exc
    return dist.PrefixStore(_store_prefix(tag), store)


class RollCallWatchdog:
    """Ends this rank with a statement about rank 0 when joining takes longer than it may.

    A store client can block inside C++ where no Python timeout reaches (a rank 0 whose socket
    accepts connections but never answers); this thread is the one deadline that always holds.
    """

    def __init__(self, env: DistEnv, timeout_s: float) -> None:
        self.env = env
        self.timeout_s = timeout_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="roll-call-watchdog", daemon=True)

    def __enter__(self) -> RollCallWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        if self.env.rank == 0:
            text = f"rank 0 could not complete the roll call within {self.timeout_s:.0f}s"
            missing: list[int] = []
        else:
            text = (f"rank {self.env.rank} got no answer from rank 0 at {self.env.master_addr}:"
                    f"{self.env.master_port} within {self.timeout_s:.0f}s: rank 0 never joined")
            missing = [0]
        emit({"ok": False, "rank": self.env.rank, "error": text, "missing_ranks": missing})
        sys.stderr.flush()
        os._exit(1)


def answer_wait_s(join_timeout_s: float) -> float:
    """How long a rank other than 0 waits for rank 0's verdict.

    Rank 0 answers join_timeout_s after it started, and it may start later than this rank (slower
    import, later node); half the timeout again plus a few seconds covers that.
    """
    return 1.5 * join_timeout_s + 5


def join(env: DistEnv, timeout_s: float, tag: str) -> tuple[Any, dict[int, dict[str, Any]]]:
    """Open the store and hold the roll call, all under one deadline. Returns (store, members)."""
    limit = timeout_s if env.rank == 0 else answer_wait_s(timeout_s)
    with RollCallWatchdog(env, limit + 5):
        store = open_store(env, limit, tag)
        members = roll_call(store, env, timeout_s)
    return store, members


def roll_call(store: Any, env: DistEnv, timeout_s: float) -> dict[int, dict[str, Any]]:
    """Every rank reports in; rank 0 decides. Returns rank -> {host, pid, local_rank} on success."""
    me = {"host": socket.gethostname(), "pid": os.getpid(), "local_rank": env.local_rank}
    store.set(f"joined/{env.rank}", wire.dumps(me))
    if env.rank == 0:
        deadline = time.monotonic() + timeout_s
        waiting = set(range(env.world_size))
        while waiting and time.monotonic() < deadline:
            waiting = {r for r in waiting if not store.check([f"joined/{r}"])}
            if waiting:
                time.sleep(ROLL_CALL_POLL_S)
        missing = sorted(waiting)
        store.set("verdict", wire.dumps({"missing": missing}))
        if missing:
            raise RanksMissing(missing, f"{_ranks_text(missing)} of {env.world_size} never joined within {timeout_s:.0f}s")
    else:
        store.wait(["verdict"], dt.timedelta(seconds=answer_wait_s(timeout_s)))
        missing = json.loads(store.get("verdict"))["missing"]
        if missing:
            raise RanksMissing(missing, f"rank 0 reports {_ranks_text(missing)} of {env.world_size} never joined")
    return {r: json.loads(store.get(f"joined/{r}")) for r in range(env.world_size)}


def device_id_safe(torch_version: str) -> bool:
    """Whether init_process_group(device_id=...) may be passed on this torch.

    It exists from torch 2.3 (a TypeError before; the package allows 2.1), and on 2.6.0 to 2.7.0
    it makes NCCL hang at random (pytorch/pytorch#153960, fixed in 2.7.1).
    """
    release = torch_version.split("+")[0]
    parts: list[int] = []
    for piece in release.split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    if len(parts) < 2:
        return False
    version = tuple(parts + [0] * (3 - len(parts)))
    return version >= (2, 3, 0) and not ((2, 6, 0) <= version <= (2, 7, 0))


def init_group(store: Any, env: DistEnv, backend: str, pg_timeout_s: float, device: Any = None) -> None:
    import torch
    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if device is not None and getattr(device, "type", "cpu") == "cuda" and device_id_safe(torch.__version__):
        kwargs["device_id"] = device  # eager NCCL communicator creation, errors surface here
    dist.init_process_group(
        backend, store=store, rank=env.rank, world_size=env.world_size,
        timeout=dt.timedelta(seconds=pg_timeout_s), **kwargs,
    )
    stop_inside_collectives_if_asked(env)


# Fault injection for tests, through the environment only (never a parameter a user sets): the rank
# named here joins the roll call and the process group like every other, then stops inside its first
# all_reduce and stays there until it is killed: a rank that hangs mid-job, as a wedged GPU would.
FAULT_STOP_ENV = "PREFLIGHT_FAULT_STOP_IN_COLLECTIVE"


def stop_inside_collectives_if_asked(env: DistEnv) -> None:
    wanted = os.environ.get(FAULT_STOP_ENV, "").strip()
    if not wanted or int(wanted) != env.rank:
        return
    import torch.distributed as dist

    def stopped(*_: Any, **__: Any) -> None:
        print(f"rank {env.rank}: fault injection, stopped inside all_reduce", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)

    dist.all_reduce = stopped


def finish_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(wire.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def run_worker(body: Callable[[argparse.Namespace, DistEnv], dict[str, Any] | None], args: argparse.Namespace) -> None:
    """Run one rank's body; rank 0 prints its result; any failure prints an error line and exits 1."""
    die_with_parent()
    env = dist_env_from(args)
    hang_if_absent(env, args.absent_rank)
    try:
        result = body(args, env)
    except RanksMissing as exc:
        emit({"ok": False, "rank": env.rank, "error": str(exc), "missing_ranks": exc.missing})
        record_error_file(exc)
        sys.stderr.flush()
        os._exit(1)  # skip interpreter teardown: a half-made process group can hang it
    except Exception as exc:  # noqa: BLE001 - reported, with the traceback on stderr
        traceback.print_exc()
        emit({"ok": False, "rank": env.rank, "error": f"{type(exc).__name__}: {_first_line(exc)}"})
        record_error_file(exc)
        sys.stderr.flush()
        os._exit(1)
    if env.rank == 0 and result is not None:
        emit({"ok": True, **result})
    sys.stderr.flush()
    # Skip interpreter teardown here too: under torchrun, destroying what a DistributedDataParallel
    # step leaves behind (gloo, torch 2.13) aborts about one exit in two with "terminate called
    # without an active exception", after the result is out, and torchrun reports the rank failed.
    os._exit(0)


def record_error_file(exc: BaseException) -> None:
    """Under torchrun, write the failure where torchelastic looks for it (TORCHELASTIC_ERROR_FILE),
    in its format, so that torchrun's summary and preflight's reading of it name the real error."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {"message": {"message": f"{type(exc).__name__}: {exc}",
                          "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(wire.dumps(record))
    except OSError:
        pass


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
