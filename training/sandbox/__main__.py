"""`python -m training.sandbox`: which isolation reward code gets on this host; exit status 1 when it is refused.

Runs bubblewrap once (the same probe the sandbox uses), so it checks a host or a container for real:
    python -m training.sandbox          # human-readable
    python -m training.sandbox --json   # {"mode", "ok", "isolated", "details", "reason", "fix", "uid"}
"""
from __future__ import annotations

import json
import os
import sys

from training.sandbox.isolation import isolation_info


def main(argv: list[str]) -> int:
    info = {**isolation_info(), "uid": os.getuid()}
    if "--json" in argv:
        print(json.dumps(info))
    else:
        note = "" if info["isolated"] else " (NOT isolated)" if info["ok"] else ": reward code does not run here"
        print(f"reward sandbox: {info['mode']}{note}")
        for line in info["details"]:
            print(f"  - {line}")
    return 0 if info["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
