"""The vLLM engine of training.generation (GPU workers that have vllm installed).

Written against vLLM's offline API: `LLM(model=..., tokenizer=..., dtype=..., seed=...)`,
`LLM.generate(prompts, [SamplingParams(n=, temperature=, top_p=, max_tokens=, seed=)], lora_request=)`;
each prompt gets its own SamplingParams with seed `seed + i`, the same per-prompt rule as the
transformers engine. Not exercised by the CPU test suite (no CUDA there).
"""
from __future__ import annotations

import random
from pathlib import Path

from training.generation import Generation, Generator, check_request, render


class VLLMGenerator(Generator):
    engine = "vllm"

    def __init__(self, weights: Path, tokenizer: Path, *, adapter: Path | None = None, dtype: str = "auto") -> None:
        from vllm import LLM

        self.llm = LLM(model=str(weights), tokenizer=str(tokenizer), dtype=dtype, enable_lora=adapter is not None,
                       trust_remote_code=False)
        self.tok = self.llm.get_tokenizer()
        self.lora = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest("adapter", 1, str(adapter))

    def generate(self, prompts: list[str | list[dict]], *, n: int = 1, max_response_length: int = 128,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int | None = None) -> list[list[Generation]]:
        from vllm import SamplingParams

        check_request(prompts, n, max_response_length, temperature, top_p)
        base = int(seed) if seed is not None else random.SystemRandom().randrange(2**31)
        texts = [render(p, self.tok) for p in prompts]
        params = [SamplingParams(n=int(n), temperature=float(temperature), top_p=float(top_p),
                                 max_tokens=int(max_response_length), seed=base + i) for i in range(len(texts))]
        outs = self.llm.generate(texts, params, lora_request=self.lora, use_tqdm=False)
        eos = self.tok.eos_token_id
        result: list[list[Generation]] = []
        for req in outs:
            rows = []
            for c in req.outputs:
                ids = list(c.token_ids)
                if ids and ids[-1] == eos:
                    ids = ids[:-1]
                reason = "length" if c.finish_reason == "length" else "stop"
                rows.append(Generation(text=c.text, token_ids=ids, finish_reason=reason, truncated=reason == "length"))
            result.append(rows)
        return result

    def close(self) -> None:
        self.llm = None
        super().close()
