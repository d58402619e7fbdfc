"""How long one engine iteration of a replica takes, calibrated from a measured engine run.

Continuous batching runs the engine in iterations: each one decodes a token for every
running request and prefills the prompts that joined. Its time is modelled as

    decode_base_s + decode_s_per_seq x batch + prefill_s_per_token x new prompt tokens

`bench.engine_alone` measures the three: TTFT of one prompt (its prefill), TPOT of one
stream (base + one sequence) and the saturated throughput at max_num_seqs (base + a full
batch, after taking out the prefills of its waves).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


class CalibrationError(ValueError):
    """An engine run that cannot calibrate the model, with the reason."""


@dataclass(frozen=True)
class ReplicaModel:
    prefill_s_per_token: float
    decode_base_s: float
    decode_s_per_seq: float
    max_num_seqs: int
    startup_s: float  # from launch to serving: engine start, weights, warm-up
    source: str = ""  # the engine run it came from
    # From a wake to serving, for a replica whose engine slept (pools.<name>.sleep_when_idle);
    # None: a replica the autoscaler removes is gone, and every scale-up is a cold start.
    wake_s: float | None = None

    def iteration_s(self, batch: int, new_prompt_tokens: int) -> float:
        return self.decode_base_s + self.decode_s_per_seq * batch + self.prefill_s_per_token * new_prompt_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_engine_run(cls, path: Path, startup_s: float, wake_s: float | None = None) -> ReplicaModel:
        try:
            run = json.loads(Path(path).read_text())
            single, saturated = run["single_stream"], run["saturated"]
            prompt_tokens = single["prompt_tokens"]["median"]
            ttft_s, tpot_s = single["ttft_ms"]["median"] / 1000, single["tpot_ms"]["median"] / 1000
            prompts, batch = saturated["prompts"], min(saturated["prompts"], saturated["max_num_seqs"])
            wave_prompt_tokens = saturated["prompt_tokens"] * batch / prompts
            output_tokens = saturated["output_tokens_each"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise CalibrationError(f"{path}: not a bench.engine_alone result with prompt tokens ({error!r})") from None
        prefill = ttft_s / prompt_tokens
        wave_s = saturated["seconds"] * batch / prompts
        tpot_full = (wave_s - prefill * wave_prompt_tokens) / output_tokens
        per_seq = max(0.0, (tpot_full - tpot_s) / (batch - 1)) if batch > 1 else 0.0
        return cls(prefill_s_per_token=prefill, decode_base_s=max(tpot_s - per_seq, 1e-6), decode_s_per_seq=per_seq,
                   max_num_seqs=saturated["max_num_seqs"], startup_s=startup_s, source=str(path), wake_s=wake_s)
