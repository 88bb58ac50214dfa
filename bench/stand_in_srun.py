"""A stand-in for srun, for bench/slurm_simulated.py --slurm: answers at once with a recorded agent stream.

Called as SlurmTransport and SlurmStep call srun. A step on one node (`-N1`) prints the stream as it
is, as `cat` would. A step across nodes (`-l`, `-w n1,...`) reads the job from stdin and prints, for
every node, what that node's task would print under `srun -l`: its guard's first line, the stream
(the hello naming the node, long lines in pieces of the job's max_line, as agents in a step send
them) and its guard's last line, every line labelled with the task's number. The stream's path is
in PREFLIGHT_BENCH_STREAM. Not a test and not Slurm: it measures the coordinator, nothing else.
"""

from __future__ import annotations

import json
import os
import sys

HELLO, MORE = "PREFLIGHT-HELLO ", "PREFLIGHT-MORE "


def main(argv: list[str]) -> int:
    stream = open(os.environ["PREFLIGHT_BENCH_STREAM"], encoding="utf-8").read().splitlines()
    options = argv[:argv.index("--")] if "--" in argv else argv
    if "-l" not in options:
        sys.stdout.write("\n".join(stream) + "\n")
        return 0
    names = options[options.index("-w") + 1].split(",")
    job = json.loads(sys.stdin.readline())
    limit = int(job.get("max_line") or 0)
    width = len(str(len(names) - 1))
    out = []
    for task, name in enumerate(names):
        label = f"{task:>{width}}: "
        out.append(f"{label}@@pid 1 2 -")
        for line in stream:
            if line.startswith(HELLO):
                line = HELLO + json.dumps({**json.loads(line[len(HELLO):]), "node": name})
            while limit and len(line) > limit:
                out.append(f"{label}{MORE}{line[:limit - len(MORE)]}")
                line = line[limit - len(MORE):]
            out.append(label + line)
        out.append(f"{label}@@exit 0")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
