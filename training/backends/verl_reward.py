"""VERL's `compute_score`, backed by our reward sandbox (runs inside VERL's reward workers).

VERL imports the generated `<run_dir>/verl/reward_fn.py` with `load_extern_object` in every
reward-loop Ray worker; that stub calls `make_compute_score(config_path)`. The naive reward
manager then calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=,
**kwargs)` once per sample from a thread pool. Here:

- each process keeps one `SandboxPool` per function component alive across calls (its share of the
  job's `hp.reward_workers` sandboxes: the budget over VERL's `reward.num_workers` processes), created
  lazily and re-created after a fork or a crash;
- concurrent calls are gathered by a `MicroBatcher` into one `score_batch` call, so the
  pool sees batches even though VERL calls per sample (and splits each over its sandboxes);
- a model component is scored over HTTP on VERL's reward-model router (the address and the
  reward model's tokenizer arrive as kwargs when `reward.reward_model.enable=True`);
- components are mixed by `training.reward_mix` (as in the local backend and test-runs), and
  every sample returns the same keys, because VERL builds the extra-info columns from the first
  sample's keys: "score", "acc", "reward_error", "r/<component>" (its own score, NaN where it failed),
  "err/<component>" (1.0 where it failed), "log/<component>" (what its reward code printed for the sample,
  capped by the sandbox; "" when nothing) and the scalar extras of rewards that return a dict.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from training.reward_mix import check_shaping, mix
from training.winrate import outcome

FIXED_KEYS = ("score", "acc", "reward_error")
REFERENCE_KEYS = ("reference_score", "win")
_NAN = float("nan")


def json_safe(value: Any) -> Any:
    """Return `value` with numpy scalars/arrays turned into plain JSON types (for the sandbox)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return json_safe(value.tolist())
    return str(value)


class MicroBatcher:
    """Gather items submitted from many threads into batches for one worker thread.

    `fn(items) -> results` is only ever called from the worker thread, so it need not be
    thread-safe. A batch closes `window_s` after its first item or at `max_batch` items.
    """

    def __init__(self, fn: Callable[[list[Any]], list[Any]], window_s: float = 0.005, max_batch: int = 256):
        self._fn, self._window, self._max = fn, window_s, max_batch
        self._cv = threading.Condition()
        self._pending: list[tuple[Any, Future]] = []
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, item: Any) -> Future:
        fut: Future = Future()
        with self._cv:
            if self._closed:
                raise RuntimeError("reward batcher is closed")
            self._pending.append((item, fut))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="reward-batcher", daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return fut

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _take_batch(self) -> list[tuple[Any, Future]] | None:
        with self._cv:
            while not self._pending and not self._closed:
                self._cv.wait()
            if not self._pending:
                return None
            deadline = time.monotonic() + self._window
            while len(self._pending) < self._max and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            batch, self._pending = self._pending[: self._max], self._pending[self._max:]
            return batch

    def _run(self) -> None:
        while (batch := self._take_batch()) is not None:
            try:
                results = self._fn([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"scorer returned {len(results)} results for {len(batch)} items")
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), res in zip(batch, results, strict=False):
                fut.set_result(res)


def _make_limits(limits: dict[str, Any]):
    from training.sandbox import SandboxLimits

    if hasattr(SandboxLimits, "from_dict"):  # rejects a typo in job.json's sandbox block
        return SandboxLimits.from_dict(limits)
    return SandboxLimits(**limits)


class FunctionComponent:
    """One user reward function, scored in a per-process sandbox kept alive across batches."""

    def __init__(self, name: str, source: str, function: str, limits: dict[str, Any], workers: int = 1):
        self.name, self.source, self.function, self.limits = name, source, function, limits
        self.workers = workers
        self._sb: Any = None
        self._pid = os.getpid()

    def _sandbox(self):
        if self._sb is None:
            from training.sandbox import SandboxPool

            sb = SandboxPool(self.source, name=self.function, limits=_make_limits(self.limits), size=self.workers)
            sb.__enter__()
            self._sb, self._pid = sb, os.getpid()
        return self._sb

    def score_batch(self, items: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any], str | None, str]]:
        """Return (score, extra, error, printed) per item; a failed item scores 0.0 with its error."""
        try:
            results = self._sandbox().score_batch(items)
        except Exception:  # the sandbox process died: start a fresh one and retry once
            self.close()
            results = self._sandbox().score_batch(items)
        out = []
        for res in results:
            error = getattr(res, "error", None)
            score = getattr(res, "score", None)
            if error is None and (not isinstance(score, (int, float)) or not math.isfinite(score)):
                error = f"score is not a finite number: {score!r}"
            out.append((float(score) if error is None else 0.0, dict(getattr(res, "extra", None) or {}), error,
                        getattr(res, "log", None) or ""))
        return out

    def close(self) -> None:
        sb, self._sb = self._sb, None
        if sb is not None and self._pid == os.getpid():
            # Closing a dead sandbox must not mask the real error.
            with contextlib.suppress(Exception):
                sb.__exit__(None, None, None)


class ModelComponent:
    """A reward model served by VERL (vLLM `/classify` or SGLang `/v1/embeddings`)."""

    def __init__(self, name: str, model_path: str, engine: str, retries: int = 5):
        self.name, self.model_path, self.engine, self.retries = name, model_path, engine, retries

    def score(self, solution_str: str, extra_info: dict[str, Any], kwargs: dict[str, Any]) -> float:
        address, tok = kwargs.get("reward_router_address"), kwargs.get("reward_model_tokenizer")
        if not address or tok is None:
            raise RuntimeError("a reward-model component needs reward.reward_model.enable=True "
                               "(VERL passed no reward_router_address)")
        chat = json.loads(extra_info.get("prompt_messages") or "[]")
        chat.append({"role": "assistant", "content": solution_str})
        prompt = tok.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
        if tok.bos_token and prompt.startswith(tok.bos_token):  # the server adds its own BOS
            prompt = prompt[len(tok.bos_token):]
        if self.engine == "vllm":
            out = self._post(address, "classify", {"model": self.model_path, "input": prompt, "use_activation": False})
            return float(out["data"][-1]["probs"][-1])
        out = self._post(address, "v1/embeddings", {"model": self.model_path, "input": prompt})
        return float(out["data"][-1]["embedding"][-1])

    def _post(self, address: str, endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(payload).encode()
        for attempt in range(self.retries):
            try:
                req = urllib.request.Request(f"http://{address}/{endpoint}", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as resp:
                    return json.loads(resp.read())
            except OSError:
                if attempt == self.retries - 1:
                    raise
                time.sleep(min(2 ** attempt, 10))
        raise AssertionError("unreachable")


class RewardRunner:
    """Scores samples for one process: function components, a model component, the mix."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.shaping = check_shaping(config.get("shaping", "raw"))
        self.score_references = bool(config.get("score_references"))
        self.functions: list[FunctionComponent] = []
        self.batchers: list[MicroBatcher] = []
        self.models: list[ModelComponent] = []
        self.weights: dict[str, float] = {}
        for comp in config.get("components", []):
            self.weights[comp["name"]] = float(comp.get("weight", 1.0))
            if comp["type"] == "function":
                with open(comp["source_path"], encoding="utf-8") as fh:
                    fc = FunctionComponent(comp["name"], fh.read(), comp.get("function", "compute_score"),
                                           config.get("sandbox") or {}, self.pool_size(config))
                self.functions.append(fc)
                self.batchers.append(MicroBatcher(fc.score_batch, float(config.get("batch_window_s", 0.005)),
                                                  int(config.get("max_batch", 256))))
            else:
                self.models.append(ModelComponent(comp["name"], comp["model_path"], comp.get("engine", "vllm")))
        self.names = [c["name"] for c in config.get("components", [])]
        self._extra_keys: dict[str, list[str]] | None = None
        self._lock = threading.Lock()
        self._warned = 0

    @staticmethod
    def pool_size(config: dict[str, Any]) -> int:
        """Sandboxes per function component in this process: the job's budget over VERL's reward workers."""
        from training.sandbox import pool_size

        if "loop_workers" not in config:  # a wrapper config written before pools: one sandbox, as then
            return 1
        return pool_size(config.get("reward_workers"), share=int(config.get("loop_workers") or 1))

    # -- the fixed key set -------------------------------------------------------------
    def _learn_extra_keys(self) -> dict[str, list[str]]:
        """Run each function once on the probe row; its scalar extras fix the forwarded keys."""
        with self._lock:
            if self._extra_keys is not None:
                return self._extra_keys
            keys: dict[str, list[str]] = {}
            probe = self.config.get("probe")
            for fc, batcher in zip(self.functions, self.batchers, strict=False):
                keys[fc.name] = []
                if probe:
                    item = {**probe, "solution_str": ""}
                    try:
                        _, extra, error, _ = batcher.submit(item).result()
                    except Exception as exc:  # noqa: BLE001 - user extras are optional
                        extra, error = {}, str(exc)
                    if error is None:
                        keys[fc.name] = sorted(k for k, v in extra.items()
                                               if isinstance(v, (int, float, str, bool)) and k != "score")
            self._extra_keys = keys
            return keys

    def _key(self, comp: str, key: str) -> str:
        return key if len(self.names) == 1 else f"{comp}/{key}"

    # -- scoring --------------------------------------------------------------------
    def _component_scores(self, sample: dict[str, Any], kwargs: dict[str, Any]) -> list[Future]:
        futures = [b.submit(sample) for b in self.batchers]
        for mc in self.models:
            fut: Future = Future()
            try:
                fut.set_result((mc.score(sample["solution_str"], sample["extra_info"], kwargs), {}, None, ""))
            except Exception as exc:  # noqa: BLE001 - reported per sample like a function error
                fut.set_result((0.0, {}, f"reward model: {exc}", ""))
            futures.append(fut)
        return futures

    def _mix(self, parts: list[tuple[float, dict[str, Any], str | None, str]]) -> tuple[float, list[str]]:
        names = [f.name for f in self.functions] + [m.name for m in self.models]
        mixed = mix([p[0] for p in parts], [self.weights[n] for n in names], self.shaping,
                    [p[2] for p in parts], names)
        return mixed.score, mixed.errors

    def score(self, data_source: Any, solution_str: Any, ground_truth: Any,
              extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Score one sample; returns VERL's dict form with a fixed key set."""
        keys = self._learn_extra_keys()
        extra_info = json_safe(dict(extra_info or {}))
        sample = {"data_source": json_safe(data_source), "solution_str": str(solution_str),
                  "ground_truth": json_safe(ground_truth), "extra_info": extra_info}
        pending = self._component_scores(sample, kwargs)
        reference = extra_info.get("reference")
        want_ref = self.score_references and extra_info.get("split") == "val" and isinstance(reference, str)
        ref_pending = self._component_scores({**sample, "solution_str": reference}, kwargs) if want_ref else []
        parts = [f.result() for f in pending]
        total, errors = self._mix(parts)
        out: dict[str, Any] = {"score": total, "acc": total, "reward_error": 1.0 if errors else 0.0}
        names = [f.name for f in self.functions] + [m.name for m in self.models]
        # Every component's own score (NaN where it failed) and error flag: the rollout dump keeps them and
        # ingest turns them into the run page's reward/<component>/mean and /error_share series.
        for n, p in zip(names, parts, strict=False):
            out[f"r/{n}"] = _NAN if p[2] else p[0]
            out[f"err/{n}"] = 1.0 if p[2] else 0.0
            out[f"log/{n}"] = p[3]  # what its reward code printed ("" when nothing): kept in the rollout dump
        for fc, (_, extra, _, _) in zip(self.functions, parts, strict=False):
            for k in keys.get(fc.name, []):
                v = extra.get(k, _NAN)
                out[self._key(fc.name, k)] = v if isinstance(v, (int, float, str, bool)) else _NAN
        if self.score_references:
            ref_score, win = _NAN, None
            if want_ref:
                ref_total, ref_errors = self._mix([f.result() for f in ref_pending])
                if not ref_errors:  # a reference that failed to score decides nothing
                    ref_score, win = ref_total, outcome(total, ref_total)
            out["reference_score"], out["win"] = ref_score, (_NAN if win is None else win)
        if errors:
            self._warn(errors)
        return out

    def score_many(self, samples: Sequence[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
        """Score several samples concurrently (VERL's batch-manager shape); order is kept."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(32, len(samples)))) as pool:
            futs = [pool.submit(self.score, **s, **kwargs) for s in samples]
            return [f.result() for f in futs]

    def _warn(self, errors: list[str]) -> None:
        # Reward errors score 0 and are counted in `reward_error`; print a few into log.txt.
        with self._lock:
            self._warned += 1
            if self._warned <= 20 or self._warned % 1000 == 0:
                print(f"[reward] sample scored 0 after an error (#{self._warned}): {'; '.join(errors)[:500]}",
                      file=sys.stderr, flush=True)

    def close(self) -> None:
        for b in self.batchers:
            b.close()
        for f in self.functions:
            f.close()


_RUNNERS: dict[tuple[int, str], RewardRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def get_runner(config_path: str) -> RewardRunner:
    """The runner of this process for `config_path` (a forked child gets its own)."""
    key = (os.getpid(), os.path.abspath(config_path))
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            with open(config_path, encoding="utf-8") as fh:
                runner = RewardRunner(json.load(fh))
            _RUNNERS[key] = runner
        return runner


@atexit.register
def _close_runners() -> None:
    for (pid, _), runner in list(_RUNNERS.items()):
        if pid == os.getpid():
            runner.close()


def make_compute_score(config_path: str) -> Callable[..., dict[str, Any]]:
    """Return a `compute_score` in VERL's contract bound to the wrapper config at `config_path`."""
    config_path = os.path.abspath(config_path)
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"reward wrapper config not found: {config_path}")

    def compute_score(data_source: Any, solution_str: Any, ground_truth: Any,
                      extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        return get_runner(config_path).score(data_source, solution_str, ground_truth, extra_info, **kwargs)

    def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[Any], ground_truths: Sequence[Any],
                            extra_infos: Sequence[Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        extra_infos = extra_infos if extra_infos is not None else [None] * len(solution_strs)
        samples = [{"data_source": d, "solution_str": s, "ground_truth": g, "extra_info": e}
                   for d, s, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos, strict=False)]
        return get_runner(config_path).score_many(samples, **kwargs)

    compute_score.batch = compute_score_batch  # type: ignore[attr-defined]
    return compute_score
