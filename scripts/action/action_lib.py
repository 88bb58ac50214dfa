"""Helpers of scripts/action/preflight-action.sh that are easier to get right in Python.

    action_lib.py split-args TEXT       the `args` input split like a shell would (quotes honoured,
                                        nothing expanded), NUL-separated on stdout; exit 2 with a
                                        message on stderr for arguments the action must own
    action_lib.py judge CODE [RESULTS]  the verdict of one invocation from its exit code, checked
                                        against the results.json that invocation wrote (RESULTS,
                                        empty or absent when it wrote none). Prints two lines: the
                                        verdict, then the disagreement (empty when there is none).

Standard library only: this runs before, and independently of, the preflight it gates on.
"""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

# preflight's exit codes (preflight/verdict.py) and the verdict each one stands for.
VERDICT_OF_EXIT = {0: "GO", 1: "NO-GO", 3: "INCOMPLETE"}
EXIT_USAGE = 2
EXIT_SUBSET_GO = 4  # run --shape: a GO on a subset of the nodes only, never a GO
SUBSET_GO = "SUBSET-GO"
EXIT_INTERRUPTED = 130
ERROR = "ERROR"  # no verdict: a usage or configuration error, a crash, an install that failed
INTERRUPTED = "INTERRUPTED"


class ArgsProblem(Exception):
    pass


def split_args(text: str) -> list[str]:
    """The `args` input as argv; options the action sets itself are refused, not silently lost."""
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise ArgsProblem(f"args cannot be split: {exc}") from None
    formats = None
    for i, arg in enumerate(args):
        if arg == "--out" or arg.startswith("--out="):
            raise ArgsProblem("args must not set --out: the action writes to its report-dir input")
        if arg == "--format" and i + 1 < len(args):
            formats = args[i + 1]
        elif arg.startswith("--format="):
            formats = arg.split("=", 1)[1]
    if formats is not None and "json" not in [f.strip() for f in formats.split(",")]:
        raise ArgsProblem(f"--format {formats} leaves out json: the action reads its verdict from results.json")
    return args


def load_results(path: str) -> tuple[dict[str, Any] | None, str]:
    """(results.json as a dict, "") or (None, why it could not be read); (None, "") when there is none."""
    if not path:
        return None, ""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a preflight results.json"
    return data, ""


def judge(code: int, results: dict[str, Any] | None, unreadable: str = "") -> tuple[str, str]:
    """(verdict, disagreement): the verdict is the exit code's; a results.json that says otherwise,
    or a missing one where the exit code promises a verdict, is a disagreement."""
    if code in VERDICT_OF_EXIT:
        want = VERDICT_OF_EXIT[code]
        if unreadable:
            return ERROR, f"exit code {code} means {want}, but {unreadable}"
        if results is None:
            return ERROR, f"exit code {code} means {want}, but this run wrote no results.json"
        verdict = results.get("verdict") if isinstance(results.get("verdict"), dict) else {}
        said, said_code = verdict.get("verdict"), verdict.get("exit_code")
        if said != want or said_code != code:
            return ERROR, (f"exit code {code} means {want}, but this run's results.json says "
                           f"{said} (exit code {said_code})")
        return want, ""
    if code == EXIT_SUBSET_GO:
        verdict = results.get("verdict") if isinstance(results, dict) and isinstance(results.get("verdict"), dict) else {}
        if verdict.get("subset_go") is True and verdict.get("exit_code") == code:
            return SUBSET_GO, ""
        return ERROR, (f"exit code {code} means a GO on a subset of the nodes, but "
                       + (unreadable or ("this run wrote no results.json" if results is None else
                                         f"this run's results.json says {verdict.get('verdict')} "
                                         f"(exit code {verdict.get('exit_code')})")))
    if code == EXIT_USAGE:
        if results is not None or unreadable:
            return ERROR, "exit code 2 means nothing ran, but this run wrote a results.json"
        return ERROR, ""
    if code == EXIT_INTERRUPTED:
        # Whatever results.json holds (what finished, or nothing if the interrupt came before the
        # reports were written, or a whole run if it came just after), the run was stopped.
        return INTERRUPTED, ""
    return ERROR, ""


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "split-args":
        try:
            args = split_args(argv[1])
        except ArgsProblem as exc:
            print(exc, file=sys.stderr)
            return 2
        sys.stdout.write("".join(arg + "\0" for arg in args))
        return 0
    if len(argv) >= 2 and argv[0] == "judge":
        try:
            code = int(argv[1])
        except ValueError:
            print(ERROR)
            print(f"exit code {argv[1]!r} is not a number")
            return 0
        results, unreadable = load_results(argv[2] if len(argv) > 2 else "")
        verdict, problem = judge(code, results, unreadable)
        print(verdict)
        print(problem)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
