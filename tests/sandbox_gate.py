"""A gate that holds reward code inside the sandbox until the test lets it go, so that a test waits on the
event it wants to see (a partial count, a streamed first result), not on how fast the machine is.

The reward calls `_wait_at_gate(name)` (GATE_SOURCE, pasted into its source): it leaves `<name>.waiting` in the
sandbox's private /tmp and waits for `<name>.go` beside it. `open_gate(name)` puts that file there through
/proc/<pid>/root, the sandbox's own root as the host sees it. Each gate has a fresh name, so parallel tests and
other sandboxes never open each other's."""
from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

GATE_SOURCE = '''
def _wait_at_gate(name):
    import os, time
    open("/tmp/" + name + ".waiting", "w").close()
    while not os.path.exists("/tmp/" + name + ".go"):
        time.sleep(0.02)
'''


def new_gate() -> str:
    return f"gate-{uuid.uuid4().hex}"


def open_gate(name: str) -> bool:
    """Let every sandbox waiting at `name` go on; False when none waits there (yet)."""
    opened = False
    for proc in Path("/proc").iterdir():
        waiting = proc / "root" / "tmp" / f"{name}.waiting"
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and waiting.exists():
                waiting.with_name(f"{name}.go").touch()
                opened = True
    return opened
