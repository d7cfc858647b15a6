"""Print, one per line, the uv arguments that give uv the package sources pip is configured with.

uv does not read pip's configuration (pip.conf files, PIP_* variables), so a machine that serves
packages from a local index or a wheel folder, or caps versions with a global constraints file,
would resolve differently under uv than under pip. This reads pip's merged configuration (files in
pip's precedence order, then PIP_* variables) and repeats its index, find-links and constraint
settings for uv. Run it with any Python that has pip; it prints nothing when pip is not configured.
"""
from __future__ import annotations

import os
import sys


def pip_settings() -> dict[str, str]:
    try:
        from pip._internal.configuration import Configuration
    except ImportError:  # no pip here: nothing configured to repeat
        return {}
    config = Configuration(isolated=False)
    try:
        config.load()
    except Exception:  # an unreadable pip.conf is pip's problem to report, not ours
        return {}
    # Newer pips list (file, {key: value}) per file in load order; older ones list (key, value).
    pairs: list[tuple[str, str]] = []
    for key, value in config.items():
        pairs += list(value.items()) if isinstance(value, dict) else [(key, value)]
    merged: dict[str, str] = {}
    # pip reads [global], then [install] (the command's section), then PIP_* variables (":env:");
    # within each, a later file overrides an earlier one.
    for section in ("global", "install", ":env:"):
        for key, value in pairs:
            name_section, _, option = key.partition(".")
            if name_section == section:
                merged[option.replace("_", "-")] = str(value)
    return merged


def uv_args(settings: dict[str, str]) -> list[str]:
    args: list[str] = []
    if settings.get("index-url"):
        args += ["--index-url", settings["index-url"].split()[0]]
    extras = settings.get("extra-index-url", "").split()
    for url in extras:
        args += ["--extra-index-url", url]
    for link in settings.get("find-links", "").split():
        args += ["--find-links", link]
    for path in settings.get("constraint", "").split():
        if os.path.exists(path):
            args += ["--constraint", path]
    if extras or settings.get("find-links"):
        # pip picks the best version across all of its sources; uv's default would only look at
        # the first source that knows a package (and miss e.g. a local CPU torch wheel).
        args += ["--index-strategy", "unsafe-best-match"]
    return args


if __name__ == "__main__":
    sys.stdout.write("".join(f"{arg}\n" for arg in uv_args(pip_settings())))
