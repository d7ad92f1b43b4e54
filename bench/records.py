"""What a configuration writes: its manifest and one row per decoded example, the same columns
whichever entry point decoded it (``run`` or the lm-eval backend). docs/results-schema.md lists
the columns."""

from __future__ import annotations

import json
import math
import platform
import subprocess
from dataclasses import asdict
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from bench.config import RunConfig
from bench.decode_stats import DecodeStats
from bench.store import SCHEMA, SHARED_SETTINGS, ResultStore


@cache
def git_revision() -> str | None:
    """The checkout's commit, asked of git once per process (every manifest of a run names it)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment(device: torch.device) -> dict[str, Any]:
    """The versions and machine a manifest records. datasets' version is read from its installed
    metadata: importing it only to ask took 0.35 s of every run, also of runs that load no dataset."""
    import transformers

    import bench

    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or platform.machine()
    )
    return {
        "versions": {
            "bench": bench.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "datasets": version("datasets"),
            "python": platform.python_version(),
        },
        "device_name": name,
        "cpu_threads": torch.get_num_threads(),  # a CPU's timings depend on it (--threads)
        "git_revision": git_revision(),
    }


def write_manifest(
    store: ResultStore, cfg: RunConfig, device: torch.device, limit: int | None, **extra: Any
) -> None:
    """Every setting of a resolved configuration, its method's declarations, versions and device."""
    store.write_manifest(
        cfg.config_id,
        {
            "config_id": cfg.config_id,
            "settings": asdict(cfg),
            "label": cfg.label,
            "method_info": json.loads(cfg.info.to_json()),
            "limit": limit,
            **extra,
            **environment(device),
        },
    )


def fixed_columns(cfg: RunConfig, pair_name: str, task_name: str) -> dict[str, Any]:
    """The columns every row of a resolved configuration shares: its settings as structure
    (``params`` holds every verifier parameter, ``method_info`` what the class declares), and a
    label that is only for display."""
    info = cfg.info
    return {
        "config_id": cfg.config_id,
        **{k: getattr(cfg, k) for k in SHARED_SETTINGS},
        "task": task_name,
        "pair": pair_name,
        "method": info.name,
        "verifier": cfg.method,
        "label": cfg.label,
        "draft_len": cfg.draft_len,
        "params": json.dumps(cfg.params, sort_keys=True),
        "method_info": info.to_json(),
        "head": cfg.head,
        "draft_policy": cfg.draft_policy,
        "drafter": cfg.drafter,
        "schema": SCHEMA,
    }


def stats_columns(stats: DecodeStats) -> dict[str, Any]:
    """A decode's counters, time and cache size as row columns."""
    reached = stats.reached_per_position
    return {
        "prompt_tokens": stats.prompt_tokens,
        "new_tokens": stats.new_tokens,
        "rounds": stats.rounds,
        "drafted_tokens": stats.drafted_tokens,
        "verified_nodes": stats.verified_nodes,
        "nodes_per_round": stats.nodes_per_round,
        "accepted_tokens": stats.accepted_tokens,
        "drafted_per_position": stats.drafted_per_position,
        "accepted_per_position": stats.accepted_per_position,
        "reached_per_position": reached,
        "acceptance_rate": stats.acceptance_rate,
        "acceptance_length": stats.acceptance_length,
        "drafting_rounds": stats.drafting_rounds,
        "drafting_share": stats.drafting_share,
        "target_loglik": stats.target_loglik,
        "target_divergence": stats.target_divergence,
        "expected_acceptance": stats.expected_acceptance,
        "bias": stats.bias,
        "expected_acceptance_per_position": [
            s / r if r else math.nan for s, r in zip(stats.expected_acceptance_sum, reached)
        ],
        "bias_per_position": [s / r if r else math.nan for s, r in zip(stats.bias_sum, reached)],
        "target_forwards": stats.target_forwards,
        "draft_forwards": stats.draft_forwards,
        "wall_time_s": stats.wall_time_s,
        # Every repeat's time of an example timed more than once (the runner's timing pass): the noise.
        "wall_times_s": [] if math.isnan(stats.wall_time_s) else [stats.wall_time_s],
        "prefill_time_s": stats.prefill_time_s,
        "batch_size": stats.batch_size,
        "kv_cache_bytes": stats.kv_cache_bytes,
        "weight_mean": sum(stats.weights) / len(stats.weights) if stats.weights else math.nan,
        "weights": stats.weights,
    }


def row(
    fixed: dict[str, Any], example_id: str, completion: str, stats: DecodeStats, **more: Any
) -> dict[str, Any]:
    """One example's row: the configuration's columns, the completion, ``more`` (scores, the
    prompt tokens dropped, the lm-eval request's fields) and the counters."""
    return {**fixed, "example_id": example_id, "completion": completion, **more, **stats_columns(stats)}
