"""What differs between the runs on the compare page: settings, data versions, reward versions, base models.

`run_facts(job)` reads one run's facts as {row: text}; `differences` (pure) splits them into the rows
that differ and the rows that are the same in all; `legend_labels` (pure) names each run by what sets
it apart ("#12 grpo · lr 1e-06") instead of two identical "grpo · demo-tiny · demo-cpu" labels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.hparams import BY_KEY
from webapp.runs.models import Job, MetricPoint

# Rows in this order first (the rest by name); the group each row is listed under.
GROUPS = ("Run", "Base model", "Data", "Reward", "Settings")
MAX_LABEL_PARTS = 3


@dataclass(frozen=True)
class Row:
    group: str
    key: str  # short name used in legends ("lr", "data")
    label: str  # what the table says ("Learning rate (lr)")
    values: tuple[str, ...]  # one per run, in the runs' order

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def fmt(value: Any) -> str:
    """A setting as text: floats compactly (1e-06, 0.02), booleans as yes/no, missing as —."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value) or "—"
    return str(value)


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"hp": {"lr": 1e-6, "lora": {"rank": 8}}, "verl": {...}} -> {"lr": 1e-6, "lora.rank": 8, "verl.x": ...}:
    the same keys as training.hparams (hp.* without its prefix)."""
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}" if prefix else ("" if key == "hp" else str(key))
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}." if name else ""))
        elif name:
            out[name] = value
    return out


def _reward_texts(job) -> dict[str, str]:
    spec = job.reward_spec if isinstance(job.reward_spec, dict) else {}
    versions = {v.pk: v for v in job.reward_versions.all()}
    parts = []
    for comp in spec.get("components") or []:
        if not isinstance(comp, dict):
            continue
        weight = comp.get("weight", 1.0)
        if comp.get("type") == "function" and comp.get("version_id") in versions:
            v = versions[comp["version_id"]]
            parts.append(f"{v.function.name} v{v.number} × {fmt(weight)}")
        elif comp.get("type") == "model":
            parts.append(f"reward model #{comp.get('model_id')} × {fmt(weight)}")
    if not parts:  # an older run without a spec: its versions
        parts = [f"{v.function.name} v{v.number}" for v in versions.values()]
    return {"reward": "; ".join(sorted(parts)) or "—", "shaping": fmt(spec.get("shaping"))}


def run_facts(job) -> dict[tuple[str, str, str], str]:
    """One run's facts: {(group, short key, label): text}."""
    facts: dict[tuple[str, str, str], str] = {
        ("Run", "kind", "Kind"): job.kind, ("Run", "backend", "Backend"): job.backend,
        ("Run", "preset", "Preset"): fmt(job.preset),
        ("Run", "from", "Resumed from"): (f"#{job.parent_id} step {job.resume_checkpoint.step}"
                                          if job.resume_checkpoint_id else "—"),
        ("Base model", "base", "Base model"): (f"{job.base_model.name} (#{job.base_model.pk})" if job.base_model_id
                                               else "—"),
        ("Base model", "teacher", "Teacher model"): (f"{job.teacher_model.name} (#{job.teacher_model.pk})"
                                                     if job.teacher_model_id else "—"),
        ("Data", "data", "Dataset version"): (f"{job.dataset_version.dataset.name} v{job.dataset_version.number}"
                                              if job.dataset_version_id else "—"),
    }
    rewards = _reward_texts(job)
    facts[("Reward", "reward", "Reward versions (× weight)")] = rewards["reward"]
    facts[("Reward", "shaping", "Reward shaping")] = rewards["shaping"]
    for key, value in sorted(flatten(job.config or {}).items()):
        setting = BY_KEY.get(key)
        facts[("Settings", key, f"{setting.label} ({key})" if setting else key)] = fmt(value)
    return facts


def differences(facts: list[dict[tuple[str, str, str], str]]) -> tuple[list[Row], list[Row]]:
    """(rows that differ between the runs, rows the same in all), grouped in GROUPS order.

    A fact one run lacks counts as "—" for it (a setting added after an older run was launched)."""
    seen = list(dict.fromkeys(k for f in facts for k in f))  # first appearance; settings come sorted
    keys = sorted(seen, key=lambda k: (GROUPS.index(k[0]) if k[0] in GROUPS else 99,
                                       k[1] if k[0] == "Settings" else ""))
    rows = [Row(g, key, label, tuple(f.get((g, key, label), "—") for f in facts)) for g, key, label in keys]
    return [r for r in rows if r.differs], [r for r in rows if not r.differs]


def legend_labels(ids: list[int], kinds: list[str], differing: list[Row]) -> list[str]:
    """One label per run: "#id kind" plus the values that set it apart (at most MAX_LABEL_PARTS, then "+N")."""
    parts_rows = [r for r in differing if r.key != "kind"]
    labels = []
    for i, (pk, kind) in enumerate(zip(ids, kinds, strict=True)):
        parts = [f"{r.key} {r.values[i]}" for r in parts_rows[:MAX_LABEL_PARTS]]
        if len(parts_rows) > MAX_LABEL_PARTS:
            parts.append(f"+{len(parts_rows) - MAX_LABEL_PARTS} more")
        labels.append(" · ".join([f"#{pk} {kind}", *parts]))
    return labels


def latest_win_rates(job) -> list[dict[str, Any]]:
    """Each data source's validation win rate at the last step that logged one (wins / ties / losses too)."""
    from webapp.monitoring import charts, selectors, winrates

    out = []
    for source in charts.win_rate_sources(selectors.metric_names(job)):
        keys = winrates.metric_keys(source)
        step = (MetricPoint.objects.filter(job=job, name=keys[0]).exclude(value=None)
                .order_by("-step").values_list("step", flat=True).first())
        if step is None:
            continue
        values = selectors.values_at_steps(job, keys, [step])[step]
        out.append({"source": source, "step": step, "view": winrates.from_metrics(values, source)})
    return out


def labels_for(jobs: list) -> dict[int, str]:
    """{job id: legend label} for the chosen runs."""
    differing, _same = differences([run_facts(j) for j in jobs])
    return dict(zip([j.pk for j in jobs], legend_labels([j.pk for j in jobs], [j.kind for j in jobs], differing),
                    strict=True))


def compare_table(jobs: list) -> dict[str, Any]:
    """What the compare page shows beside the curves, for the chosen runs (in their order)."""
    facts = [run_facts(j) for j in jobs]
    differing, same = differences(facts)
    labels = legend_labels([j.pk for j in jobs], [j.kind for j in jobs], differing)
    return {"differing": differing, "same": same, "labels": dict(zip([j.pk for j in jobs], labels, strict=True)),
            "runs": [{"job": j, "label": lab, "win_rates": latest_win_rates(j)} for j, lab in zip(jobs, labels,
                                                                                                   strict=True)]}


def load_jobs(project, ids: list[int]) -> list:
    """The chosen runs with what run_facts reads, in id order."""
    return list(Job.objects.filter(project=project, pk__in=ids).order_by("pk").select_related(
        "base_model", "teacher_model", "dataset_version__dataset", "resume_checkpoint").prefetch_related(
        "reward_versions__function"))
