"""Hand-made result rows for the report tests: given methods and per-example times, everything
else constant."""

import numpy as np
import pandas as pd

from bench.store import SCHEMA, SHARED_SETTINGS


def result_rows(times: dict[str, list[float | list[float]]]) -> pd.DataFrame:
    """Result rows of ar and sd on four examples with given times (everything else constant): an
    example's time, timed twice alike (noise measured: none), or the list of its repeats' times."""
    settings = dict(
        task="gsm8k",
        pair="tiny",
        temperature=1.0,
        max_new_tokens=8,
        seed=0,
        data="fixture",
        num_fewshot=0,
        split="test",
        chat_template=False,
        device="cpu",
        dtype="float32",
        engine="eager",
        truncate_prompt="none",
    )
    assert set(settings) == set(SHARED_SETTINGS)
    out = []
    for method, ts in times.items():
        for i, t in enumerate(ts):
            out.append(
                {
                    **settings,
                    "config_id": method,
                    "label": method,
                    "method": method,
                    "example_id": str(i),
                    "draft_len": 0 if method == "ar" else 5,
                    "params": "{}",
                    "head": None,
                    "schema": SCHEMA,
                    "drafted_tokens": 0 if method == "ar" else 10,
                    "accepted_tokens": 0 if method == "ar" else 7,
                    "reached_per_position": [0] * 5 if method == "ar" else [2, 2, 2, 2, 2],
                    "expected_acceptance": np.nan,
                    "bias": np.nan,
                    "target_divergence": 0.0,  # every setting as close to the target as ar: on its distribution
                    "quality": float(i % 2),
                    "new_tokens": 8,
                    "rounds": 8 if method == "ar" else 2,
                    "weight_mean": np.nan,
                    "wall_time_s": float(np.median(t)),
                    "wall_times_s": list(t) if isinstance(t, list) else [t, t],
                }
            )
    return pd.DataFrame(out)
