"""What VERL resolved: compose the override list exactly as `main_ppo` does and check it against the plan.

`main_ppo` is `@hydra.main(config_name="ppo_trainer")`; Hydra accepts any key its config tree holds,
including VERL 0.9's legacy top-level reward keys (`custom_reward_function`, `reward_model`,
`sandbox_fusion`, verl/trainer/config/legacy_reward_impl.yaml), which the reward loop then half
migrates. So before an attempt starts, the worker composes the same list with the installed VERL's
config and compares, key by key:

- every form setting VERL takes with the value at its resolved key (the table the launch preview shows);
- every override of the plan with its resolved value (paths, batch plan, reward, trainer version);
- the reward function path, the reward manager and the trainer version with the planned ones;
- the legacy top-level reward keys with null.

A mismatch is a `BackendError` naming the key, the form's (or plan's) value and the resolved value.
Hydra and OmegaConf are imported lazily; VERL itself is never imported (only its config folder is read).
"""
from __future__ import annotations

import importlib.util
import math
import os
import threading
from dataclasses import dataclass
from typing import Any

from training.backends.base import BackendError
from training.backends.verl_overrides import REWARD_MANAGER, VerlJob
from training.verl_cpu import cpu_overrides

LEGACY_REWARD_ROOTS = ("custom_reward_function", "reward_model", "sandbox_fusion")
REWARD_PATH = "reward.custom_reward_function.path"
REWARD_NAME = "reward.custom_reward_function.name"
REWARD_MANAGER_KEY = "reward.reward_manager.name"
TRAINER_VERSION = "trainer.use_v1"
_ABSENT = object()


class VerlMissing(BackendError):
    """VERL is not installed in this process's environment (a web host may not have it; a worker must)."""


@dataclass(frozen=True)
class Row:
    """One line of "setting -> VERL key -> resolved value"."""

    setting: str  # the form's label, or what the plan decides ("Reward function")
    key: str  # the Hydra path
    form: Any  # the value the user chose (or the plan's, for planned rows)
    planned: Any  # the value VERL must resolve at `key`
    resolved: Any = _ABSENT
    note: str = ""  # why `planned` differs from `form` (the CPU rehearsal, the batch plan)
    checked: bool = True  # False: the setting keeps VERL's default there, shown but not compared

    @property
    def ok(self) -> bool:
        return not self.checked or same_value(self.planned, self.resolved)

    def as_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "key": self.key, "form": show(self.form), "resolved": show(self.resolved),
                "note": self.note, "ok": self.ok}


def show(value: Any) -> str:
    if value is _ABSENT:
        return "(missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def same_value(want: Any, got: Any) -> bool:
    if got is _ABSENT:
        return False
    if isinstance(want, bool) or isinstance(got, bool) or want is None or got is None:
        return want is got or (isinstance(want, bool) and want == got and isinstance(got, bool))
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(want) == len(got) and all(same_value(w, g) for w, g in zip(want, got, strict=True))
    return str(want) == str(got) and type(want) is type(got)


# Hydra keeps one initialised config per process: two threads composing at once (two job pages of a threaded
# web server) made the second fail with "GlobalHydra is already initialized".
_HYDRA_LOCK = threading.Lock()


def config_dir() -> str:
    """The installed VERL's Hydra config folder (found without importing VERL)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise VerlMissing("VERL is not installed on this worker (python -m pip install verl)")
    return os.path.join(os.path.dirname(spec.origin), "trainer", "config")


def compose(overrides: list[str]):
    """The config `python -m verl.trainer.main_ppo <overrides>` sees (a `--config-name=` first item chooses it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    name, rest = "ppo_trainer", list(overrides)
    if rest and rest[0].startswith("--config-name="):
        name, rest = rest[0].split("=", 1)[1], rest[1:]
    try:
        with _HYDRA_LOCK, initialize_config_dir(config_dir=config_dir(), version_base=None):
            return hydra_compose(config_name=name, overrides=rest)
    except (HydraException, OmegaConfBaseException) as exc:
        raise BackendError(f"VERL's config refuses the overrides: {exc}") from None


def resolved_value(cfg, key: str) -> Any:
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key.lstrip("+"), default=_ABSENT, throw_on_missing=False)
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def setting_rows(job: VerlJob, pairs: list[tuple[str, Any]]) -> list[Row]:
    """The form's settings for this job, each at the key(s) VERL reads, with the value it must resolve."""
    planned = dict(pairs)
    cpu_keys = {k for k, _ in cpu_overrides("", 1)} if job.cpu else set()
    rows: list[Row] = []
    for s, form, setting_pairs in job.settings:
        if s.verl.planned:
            targets = [(p, planned[p]) for p in s.verl.paths if p in planned]
            rows += [Row(s.label, p, form, v, note="" if same_value(form, v) else "planned") for p, v in targets]
            continue
        if not setting_pairs:
            rows.append(Row(s.label, s.verl.paths[0], form, None, note="VERL's default", checked=False))
        for path, want in setting_pairs:
            note = ""
            if path in cpu_keys and not same_value(want, planned.get(path)):
                want, note = planned[path], "CPU rehearsal"
            rows.append(Row(s.label, path, form, want, note=note))
    return rows


def plan_rows(job: VerlJob, reward_module: str | None) -> list[Row]:
    """What the plan decides besides the form: the reward function, the reward manager, the trainer version."""
    rows = [Row("Reward manager", REWARD_MANAGER_KEY, REWARD_MANAGER, REWARD_MANAGER, note="planned"),
            Row("V1 trainer (false: legacy)", TRAINER_VERSION, job.use_v1, job.use_v1, note="planned")]
    if reward_module is not None:
        rows[:0] = [Row("Reward function", REWARD_PATH, reward_module, reward_module, note="planned"),
                    Row("Reward entry point", REWARD_NAME, "compute_score", "compute_score", note="planned")]
    return rows


def legacy_rows(cfg) -> list[Row]:
    """Every legacy top-level reward key that holds a value (each must stay null)."""
    from omegaconf import OmegaConf

    out: list[Row] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        elif node is not None:
            out.append(Row("Legacy reward key (VERL 0.9 ignores or half-migrates it)", prefix, None, None,
                           resolved=node, note="must stay null"))

    for root in LEGACY_REWARD_ROOTS:
        if root in cfg:
            walk(root, OmegaConf.to_container(cfg[root], resolve=False))
    return out


def resolve_rows(rows: list[Row], cfg) -> list[Row]:
    return [r if r.resolved is not _ABSENT else
            Row(r.setting, r.key, r.form, r.planned, resolved_value(cfg, r.key), r.note, r.checked) for r in rows]


def check(job: VerlJob, overrides: list[str], pairs: list[tuple[str, Any]],
          reward_module: str | None) -> list[Row]:
    """Compose `overrides` as main_ppo will and compare with the plan `pairs` and the job's reward module
    (None: no reward function); the table rows, or a BackendError."""
    cfg = compose(overrides)
    table = resolve_rows(setting_rows(job, pairs) + plan_rows(job, reward_module), cfg)
    shown = {r.key for r in table}
    hidden = resolve_rows([Row("Planned override", k, v, v) for k, v in pairs
                           if k not in shown and not k.startswith("hydra.")], cfg)
    bad = [r for r in table + hidden + legacy_rows(cfg) if not r.ok]
    if bad:
        raise BackendError("VERL would not run the planned job: " + "; ".join(f"{r.key} ({r.setting}): {_want(r)}, "
                                                                             f"VERL resolved {show(r.resolved)}"
                                                                             for r in bad))
    return table


def check_text(job: VerlJob, overrides: list[str], pairs: list[tuple[str, Any]], reward_module: str | None) -> str:
    """`check`, as the table's text (what a launch writes to attempts/<K>/resolved.txt)."""
    return table_text(check(job, overrides, pairs, reward_module))


def _want(row: Row) -> str:
    if row.note == "must stay null":
        return "must stay null"
    if row.note:
        return f"planned {show(row.planned)}"
    return f"the form says {show(row.form)}"


def table_text(rows: list[Row]) -> str:
    """The table as comment lines under the dry run's command."""
    lines = ["# setting -> VERL key -> resolved value"]
    for r in rows:
        note = f"  [{r.note}]" if r.note else ""
        lines.append(f"#   {r.setting} ({show(r.form)}) -> {r.key} -> {show(r.resolved)}{note}")
    return "\n".join(lines) + "\n"
