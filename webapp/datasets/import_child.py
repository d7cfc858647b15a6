"""`python -m webapp.datasets.import_child IMPORT_ID MEMORY_MB`: run one queued import under a memory cap.

The worker runs every import this way (`webapp.datasets.isolation`): the cap is set before Django or
any reader loads, so a file that decodes into more memory than allowed ends in a MemoryError here,
with its partial version discarded, instead of taking the worker down. RLIMIT_DATA caps the memory
the process writes to (heap and private mappings, where decoded rows live); unlike RLIMIT_AS it
does not count address space that libraries only reserve.
"""
from __future__ import annotations

import os
import resource
import sys

MEMORY_EXIT = 3  # the child ran out of its memory cap


def main(argv: list[str]) -> int:
    import_id, memory_mb = int(argv[0]), int(argv[1])
    cap = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.datasets.services import import_run

    try:
        import_run(import_id=import_id)
    except MemoryError:
        return MEMORY_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
