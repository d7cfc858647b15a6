"""Score responses with a job's `reward` block: function components in the sandbox, model
components in-process, a weighted sum, then shaping.

User reward code only ever runs inside `training.sandbox.RewardSandbox`. The in-process
fallback exists for this package's own tests and needs `allow_in_process_for_tests=True`
*and* a missing sandbox module.

Shaping of the weighted sum `s`:
- "raw": `s` as is;
- "binary": 1.0 if `s >= 0.5` else 0.0;
- "normalized": `tanh(s)`, which squashes any real score into (-1, 1), is monotonic (so it keeps
  rankings and win/loss outcomes) and is close to the identity near 0.
A component that fails on an item contributes 0 and the item's `error` says why.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHAPINGS = ("raw", "binary", "normalized")


class RewardConfigError(ValueError):
    """The job's reward block is unusable; the message says which part."""


class SandboxUnavailable(RuntimeError):
    """User reward code needs training.sandbox, which this installation lacks."""


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


def shape(raw: float, shaping: str) -> float:
    """Apply the job's shaping to a weighted-sum score (see module docstring)."""
    if shaping == "binary":
        return 1.0 if raw >= 0.5 else 0.0
    if shaping == "normalized":
        return math.tanh(raw)
    if shaping == "raw":
        return raw
    raise RewardConfigError(f"reward.shaping must be one of {SHAPINGS}, not {shaping!r}")


def join_prompt_response(prompt: str, response: str) -> str:
    """The text a reward model scores; the reward-model trainer uses the same join."""
    return prompt + response


def _sandbox_module():
    """Return training.sandbox, or None when that module does not exist (yet)."""
    try:
        import training.sandbox as sb
    except ModuleNotFoundError as exc:
        if exc.name in ("training.sandbox",):
            return None
        raise
    return sb


def _limits(sb, cfg: dict) -> Any:
    """Build SandboxLimits from the job's `sandbox` block, passing only the fields it knows."""
    cls = getattr(sb, "SandboxLimits", None)
    if cls is None:
        return None
    if hasattr(cls, "from_dict"):
        try:
            return cls.from_dict(cfg)
        except ValueError as exc:
            raise RewardConfigError(f"job.sandbox: {exc}") from None
    if dataclasses.is_dataclass(cls):
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in cfg.items() if k in known})
    return cls(**cfg)


class _InProcessFunction:
    """Test-only stand-in for RewardSandbox: exec's the source in this process."""

    def __init__(self, source: str, name: str) -> None:
        ns: dict[str, Any] = {"__name__": "reward_under_test"}
        exec(compile(source, "<reward>", "exec"), ns)  # noqa: S102 - tests only, see module docstring
        if not callable(ns.get(name)):
            raise RewardConfigError(f"reward source defines no function {name!r}")
        self.fn = ns[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def score_batch(self, items: list[dict]) -> list[Any]:
        out = []
        for it in items:
            try:
                val = self.fn(**it)
                score = float(val["score"] if isinstance(val, dict) else val)
                out.append(_Result(score, val if isinstance(val, dict) else {}, None))
            except Exception as exc:  # a user bug must not kill training
                out.append(_Result(None, {}, f"{type(exc).__name__}: {exc}"))
        return out


@dataclass
class _Result:
    score: float | None
    extra: dict
    error: str | None


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
                 device: str = "cpu", allow_in_process_for_tests: bool = False) -> None:
        if not isinstance(reward, dict) or not reward.get("components"):
            raise RewardConfigError("reward.components is empty: add at least one function or model component")
        self.shaping = reward.get("shaping", "raw")
        if self.shaping not in SHAPINGS:
            raise RewardConfigError(f"reward.shaping must be one of {SHAPINGS}, not {self.shaping!r}")
        self.run_dir = Path(run_dir)
        self.sandbox_cfg = dict(sandbox or {})
        self.device = device
        self.allow_in_process = allow_in_process_for_tests
        self.specs = [self._check(i, c) for i, c in enumerate(reward["components"])]
        self.weights = [float(c.get("weight", 1.0)) for c in self.specs]
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
        sb = _sandbox_module()
        for spec in self.specs:
            if spec["type"] == "model":
                self._runners.append(_ModelComponent(spec["resolved"], self.device))
                continue
            source = spec["resolved"].read_text()
            name = spec.get("name") or "compute_score"
            if sb is not None:
                runner = sb.RewardSandbox(source, name=name, limits=_limits(sb, self.sandbox_cfg))
                self.backend = "sandbox"
                load_error = getattr(sb, "RewardLoadError", None)
                try:
                    self._runners.append(runner.__enter__())
                except Exception as exc:
                    self.close()
                    if load_error is not None and isinstance(exc, load_error):
                        raise RewardConfigError(f"reward {spec['resolved'].name}: {exc}") from None
                    raise
                continue
            elif self.allow_in_process:
                runner = _InProcessFunction(source, name)
                self.backend = "in_process_for_tests"
            else:
                self.close()
                raise SandboxUnavailable(
                    "the reward sandbox (training.sandbox) is not installed; refusing to run user "
                    f"reward code from {spec['resolved']} in the training process")
            self._runners.append(runner.__enter__())
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
        errors: list[list[str]] = [[] for _ in reqs]
        for spec, runner in zip(self.specs, self._runners, strict=True):
            if spec["type"] == "model":
                per_comp.append(runner.score(reqs))
                continue
            items = [{"data_source": r.data_source, "solution_str": r.response, "ground_truth": r.ground_truth,
                      "extra_info": r.extra_info} for r in reqs]
            try:
                results = runner.score_batch(items)
            except Exception as exc:  # the whole batch failed (time limit, crash)
                results = [_Result(None, {}, f"{type(exc).__name__}: {exc}") for _ in reqs]
            scores = []
            for j, res in enumerate(results):
                if res.error or res.score is None:
                    errors[j].append(f"{spec.get('name') or 'compute_score'}: {res.error or 'no score'}")
                    scores.append(None)
                else:
                    scores.append(float(res.score))
            per_comp.append(scores)
        out = []
        for j in range(len(reqs)):
            comps = [c[j] for c in per_comp]
            raw = sum(w * (s if s is not None and math.isfinite(s) else 0.0)
                      for w, s in zip(self.weights, comps, strict=True))
            out.append(RewardResult(shape(raw, self.shaping), raw, comps, "; ".join(errors[j]) or None))
        return out
