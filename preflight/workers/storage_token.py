"""Write or read the tokens storage.shared uses to tell one shared filesystem from several.

    python -m preflight.workers.storage_token write DIR PATH TOKEN
        "@@fstype TYPE", then "@@written", or "@@error WHY" (exit 3: no such directory, 4: cannot write)
    python -m preflight.workers.storage_token read PATH...
        per path: "@@found PATH" and its first line, or "@@missing PATH"
"""

from __future__ import annotations

import os
import sys


def write(directory: str, path: str, token: str) -> int:
    from preflight.machine.filesystems import filesystem_type

    if not os.path.isdir(directory):
        print(f"@@error no such directory: {directory}")
        return 3
    print(f"@@fstype {filesystem_type(directory) or 'unknown'}")
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
    except OSError as exc:
        print(f"@@error cannot create a file there ({exc.strerror or exc})")
        return 4
    print("@@written")
    return 0


def read(paths: list[str]) -> int:
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                first = handle.readline().rstrip("\n")
        except OSError:
            print(f"@@missing {path}")
            continue
        print(f"@@found {path}")
        print(first)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["write"] and len(args) == 4:
        return write(*args[1:])
    if args[:1] == ["read"]:
        return read(args[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
