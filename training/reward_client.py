"""Score responses with a job's `reward` block: function components in the sandbox, model
components in-process, then the reward mix (`training.reward_mix`: weighted sum, shaping).

User reward code only ever runs inside `training.sandbox` sandboxes: each function component gets a
`SandboxPool` of `workers` sandboxes (the job's `hp.reward_workers`; None = min(CPUs, 4)) that score
each batch's shards at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.reward_mix import RewardMixError, check_shaping, component_names, mix
from training.sandbox import RewardLoadError, SandboxLimits, SandboxPool, pool_size


class RewardConfigError(ValueError):
    """The job's reward block is unusable; the message says which part."""


@dataclass
class RewardRequest:
    prompt: str
    response: str
    ground_truth: Any = None
    data_source: str = "default"
    extra_info: dict = field(default_factory=dict)


@dataclass
class RewardResult:
    score: float  # shaped
    raw: float  # weighted sum before shaping
    components: list[float | None]
    error: str | None = None
    # per component, in the order of `RewardScorer.names`: its error on this item, and the other keys a
    # reward returning a dict gave ({"score": ..., "format": 1.0} -> {"format": 1.0})
    errors: list[str | None] = field(default_factory=list)
    extras: list[dict] = field(default_factory=list)
    logs: list[str | None] = field(default_factory=list)  # per component: what its reward code printed


def join_prompt_response(prompt: str, response: str) -> str:
    """The text a reward model scores; the reward-model trainer uses the same join."""
    return prompt + response


def _limits(cfg: dict) -> SandboxLimits:
    try:
        return SandboxLimits.from_dict(cfg)
    except ValueError as exc:
        raise RewardConfigError(f"job.sandbox: {exc}") from None


class _ModelComponent:
    """A local HF sequence-classification model; its first logit is the score."""

    def __init__(self, path: Path, device: str, batch_size: int = 32) -> None:
        import torch

        from training.models import load_model_and_tokenizer

        self.torch = torch
        self.model, self.tok = load_model_and_tokenizer(path, device, "float32", kind="seq_cls")
        self.model.eval()
        self.tok.truncation_side = "left"  # the score is read at the last token
        self.max_len = int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)
        self.batch_size = batch_size

    def score(self, reqs: list[RewardRequest]) -> list[float | None]:
        torch = self.torch
        scores: list[float | None] = []
        for i in range(0, len(reqs), self.batch_size):
            texts = [join_prompt_response(r.prompt, r.response) for r in reqs[i:i + self.batch_size]]
            # same encoding as the reward-model trainer (training/local/reward_model.py)
            enc = self.tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_len,
                           add_special_tokens=False).to(self.model.device)
            with torch.no_grad():
                logits = self.model(**enc).logits[:, 0].float()
            scores.extend(float(x) for x in logits.cpu())
        return scores


class RewardScorer:
    """Scores batches of responses with the job's reward block; use it as a context manager."""

    def __init__(self, reward: dict, run_dir: str | Path, *, sandbox: dict | None = None,
                 device: str = "cpu", workers: int | None = None) -> None:
        if not isinstance(reward, dict) or not reward.get("components"):
            raise RewardConfigError("reward.components is empty: add at least one function or model component")
        try:
            self.shaping = check_shaping(reward.get("shaping", "raw"))
        except RewardMixError as exc:
            raise RewardConfigError(str(exc)) from None
        self.run_dir = Path(run_dir)
        self.sandbox_cfg = dict(sandbox or {})
        self.device = device
        try:
            self.workers = pool_size(workers)
        except ValueError as exc:
            raise RewardConfigError(f"hp.{exc}") from None
        self.slowest: list[tuple[int, float]] = []  # the last batch's slowest samples (index, ms), slowest first
        self.specs = [self._check(i, c) for i, c in enumerate(reward["components"])]
        self.weights = [float(c.get("weight", 1.0)) for c in self.specs]
        self.names = component_names(self.specs)  # as in metrics and rollout rows, on both backends
        self._runners: list[Any] = []
        self.backend = "none"

    def _check(self, i: int, comp: dict) -> dict:
        kind = comp.get("type")
        if kind not in ("function", "model"):
            raise RewardConfigError(f"reward.components[{i}].type must be 'function' or 'model', not {kind!r}")
        if not comp.get("path"):
            raise RewardConfigError(f"reward.components[{i}] has no path")
        try:
            float(comp.get("weight", 1.0))
        except (TypeError, ValueError):
            raise RewardConfigError(f"reward.components[{i}].weight is not a number") from None
        path = Path(comp["path"])
        path = path if path.is_absolute() else self.run_dir / path
        if kind == "function" and not path.is_file():
            raise RewardConfigError(f"reward.components[{i}]: reward source {path} does not exist")
        if kind == "model" and not (path / "config.json").exists():
            raise RewardConfigError(f"reward.components[{i}]: {path} is not an HF model folder")
        return {**comp, "resolved": path}

    def __enter__(self) -> RewardScorer:
        for spec in self.specs:
            if spec["type"] == "model":
                self._runners.append(_ModelComponent(spec["resolved"], self.device))
                continue
            runner = SandboxPool(spec["resolved"].read_text(), name=spec.get("name") or "compute_score",
                                 limits=_limits(self.sandbox_cfg), size=self.workers)
            self.backend = "sandbox"
            try:
                self._runners.append(runner.__enter__())
            except RewardLoadError as exc:
                self.close()
                raise RewardConfigError(f"reward {spec['resolved'].name}: {exc}") from None
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        runners, self._runners = self._runners, []
        for r in runners:
            if hasattr(r, "__exit__"):
                r.__exit__(None, None, None)

    def score(self, reqs: list[RewardRequest]) -> list[RewardResult]:
        """Score every request; never raises for a user bug (the result carries `error`)."""
        if not self._runners:
            raise RuntimeError("RewardScorer.score called outside its `with` block")
        per_comp: list[list[float | None]] = []
        per_error: list[list[str | None]] = []
        per_extra: list[list[dict]] = []
        per_log: list[list[str | None]] = []
        slowest: list[tuple[int, float]] = []
        for spec, runner in zip(self.specs, self._runners, strict=True):
            if spec["type"] == "model":
                per_comp.append(runner.score(reqs))
                per_error.append([None] * len(reqs))
                per_extra.append([{}] * len(reqs))
                per_log.append([None] * len(reqs))
                continue
            items = [{"data_source": r.data_source, "solution_str": r.response, "ground_truth": r.ground_truth,
                      "extra_info": r.extra_info} for r in reqs]
            try:
                results = runner.score_batch(items)
                slowest += results.slowest(5)
                scores = [None if res.error or res.score is None else float(res.score) for res in results]
                errs = [(res.error or "no score") if s is None else None for res, s in zip(results, scores,
                                                                                            strict=True)]
                extras = [dict(res.extra or {}) if s is not None else {} for res, s in zip(results, scores,
                                                                                           strict=True)]
                logs = [res.log for res in results]
            except Exception as exc:  # the whole batch failed (time limit, crash)
                scores, errs = [None] * len(reqs), [f"{type(exc).__name__}: {exc}"] * len(reqs)
                extras, logs = [{}] * len(reqs), [None] * len(reqs)
            per_comp.append(scores)
            per_error.append(errs)
            per_extra.append(extras)
            per_log.append(logs)
        self.slowest = sorted(slowest, key=lambda p: -p[1])[:5]
        out = []
        for j in range(len(reqs)):
            errors = [e[j] for e in per_error]
            m = mix([c[j] for c in per_comp], self.weights, self.shaping, errors, self.names)
            out.append(RewardResult(m.score, m.raw, m.components, m.error, errors, [x[j] for x in per_extra],
                                    [lg[j] for lg in per_log]))
        return out
