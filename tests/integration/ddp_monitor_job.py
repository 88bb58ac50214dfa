"""One rank of a real DDP job instrumented with preflight.integrations.monitor.instrument_ddp (run by a test).

    python -m tests.integration.ddp_monitor_job --steps 7 --textfile-dir DIR [--base-port PORT]

A one-layer model, so DDP makes exactly one gradient bucket per step. Each rank serves its
histogram on 127.0.0.1 (a free port), trains, scrapes its own /metrics over HTTP, closes the
monitor (which writes its textfile) and reports what it read. Rank 0 prints every rank's account.
"""

from __future__ import annotations

import argparse
import urllib.request
from pathlib import Path
from typing import Any

from preflight.workers.process_group import DistEnv, add_dist_arguments, finish_group, init_group, join, run_worker


def body(args: argparse.Namespace, env: DistEnv) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from preflight.integrations.monitor import instrument_ddp

    torch.set_num_threads(1)
    store, _ = join(env, args.join_timeout_s, tag="monitor-test")
    init_group(store, env, "gloo", args.pg_timeout_s)
    ddp = DistributedDataParallel(torch.nn.Linear(32, 32))
    if args.base_port:
        # As the README writes it: every rank asks for the same base port and the same textfile name.
        monitor = instrument_ddp(ddp, port=args.base_port, addr="127.0.0.1",
                                 textfile=str(Path(args.textfile_dir) / "allreduce.prom"))
    else:
        monitor = instrument_ddp(ddp, port=0, addr="127.0.0.1", textfile=str(Path(args.textfile_dir) / "r{local_rank}.prom"))
    textfile = monitor.textfile  # where this rank writes: one file per local rank
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for _ in range(args.steps):
        optimizer.zero_grad()
        ddp(torch.randn(8, 32)).square().mean().backward()
        optimizer.step()
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor.port}/metrics", timeout=10) as response:
        scraped = response.read().decode()
    monitor.close()
    mine = {"rank": env.rank, "port": monitor.port, "scraped": scraped, "textfile": textfile}
    gathered: list[Any] = [None] * env.world_size
    dist.all_gather_object(gathered, mine)
    finish_group()
    return {"ranks": gathered} if env.rank == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--textfile-dir", required=True)
    parser.add_argument("--base-port", type=int, default=0, help="instrument with this base port (and one textfile name)")
    add_dist_arguments(parser)
    run_worker(body, parser.parse_args())


if __name__ == "__main__":
    main()
