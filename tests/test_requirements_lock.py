"""requirements/lock.txt pins every package the requirement files ask for (scripts/lock.sh rewrites it)."""
from __future__ import annotations

import re
from pathlib import Path

REQ = Path(__file__).resolve().parents[1] / "requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (REQ / "lock.txt").read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[norm(match.group(1))] = match.group(2)
    return pins


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(norm(NAME.match(line).group(1)))
    return names


def test_every_requirement_is_pinned_by_the_lock():
    pins = lock_pins()
    for profile in ("base.txt", "test.txt", "bench.txt", "smollm2.txt"):
        missing = requirement_names(REQ / profile) - set(pins)
        assert not missing, f"requirements/{profile} has {sorted(missing)} without a pin: run scripts/lock.sh"


def test_the_lock_agrees_with_the_hand_written_pins():
    pins = lock_pins()
    for path in (REQ / "constraints.txt", REQ / "base.txt"):
        for line in path.read_text().splitlines():
            match = PIN.match(line.split("#", 1)[0].strip())
            if match:
                locked = pins[norm(match.group(1))].split("+")[0]  # 2.13.0+cpu satisfies ==2.13.0
                assert locked == match.group(2), \
                    f"{path.name} pins {match.group(0)}, the lock {locked}: run scripts/lock.sh"


def test_the_lock_names_no_path_of_the_machine_that_wrote_it():
    text = (REQ / "lock.txt").read_text()
    assert not re.search(r"(^|\s)(-c|-r|--find-links|--extra-index-url)\s+/", text, re.M)
    assert "file://" not in text
