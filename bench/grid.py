"""From command-line flags or a grid file to the list of configurations to run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.registry import load_yaml
from bench.runner import RunConfig, expand_methods

GRID_KEYS = {
    "tasks",
    "pairs",
    "methods",
    "limit",
    "seed",
    "temperature",
    "draft_len",
    "target_weight",
    "lenience",
    "cascade_rule",
    "cascade_alpha",
    "head",
    "mix",
    "params",
    "data",
    "max_new_tokens",
    "num_fewshot",
    "split",
    "chat_template",
    "truncate_prompt",
    "draft_policy",
}


def configs_from_flags(
    *,
    tasks: list[str],
    pairs: list[str],
    methods: list[str],
    heads: Sequence[str] = (),
    target_weights: Sequence[float] = (0.7,),
    lenience: Sequence[float] = (0.5,),
    cascade_rules: Sequence[str] = ("opt",),
    cascade_alphas: Sequence[float] = (0.5,),
    mix: str = "prob",
    params: Mapping[str, Sequence[Any]] | None = None,
    **shared: Any,
) -> list[RunConfig]:
    """Every task x pair x method configuration; heads may name {task} and {pair}. ``shared``
    holds the other fields of RunConfig (draft_len, temperature, seed, device...)."""
    out = []
    for pair in pairs:
        for task in tasks:
            expanded = expand_methods(
                methods,
                target_weights=target_weights,
                lenience=lenience,
                cascade_rules=cascade_rules,
                cascade_alphas=cascade_alphas,
                heads=[h.format(task=task, pair=pair) for h in heads],
                mix=mix,
                params=params,
            )
            out += [
                RunConfig(task=task, pair=pair, method=m, params=p, head=h, **shared) for m, p, h in expanded
            ]
    return out


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def load_grid(name_or_path: str) -> dict[str, Any]:
    builtin = resources.files("bench") / "grids" / f"{name_or_path}.yaml"
    path = builtin if builtin.is_file() else Path(name_or_path)
    if not path.is_file():
        raise BenchError(f"no grid {name_or_path!r}: give a YAML path or one of paper, tiny, demo, baselines")
    grid = load_yaml(path, "grid")
    unknown = set(grid) - GRID_KEYS
    if unknown:
        raise BenchError(
            f"grid {name_or_path}: unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(GRID_KEYS))}"
        )
    return grid


def configs_from_grid(
    name_or_path: str,
    *,
    device: str,
    dtype: str | None,
    limit: int | None,
    tasks: Sequence[str] = (),
    pairs: Sequence[str] = (),
    candidates: Sequence[str] = (),
    heads: Sequence[str] = (),
) -> tuple[list[RunConfig], int | None]:
    """A grid's configurations. A grid that leaves out ``tasks`` or ``pairs`` (a template such as
    ``baselines``) takes them from ``tasks``/``pairs``, and ``candidates`` (with their ``heads``)
    join its methods: the baseline sweeps for any verifier on any task and pair."""
    g = load_grid(name_or_path)
    template = "tasks" not in g or "pairs" not in g
    for key, given, flag in (("tasks", tasks, "--task"), ("pairs", pairs, "--pair")):
        if key in g and given:
            raise BenchError(f"grid {name_or_path} sets {key}; drop {flag} or edit the grid file")
        if key not in g and not given:
            raise BenchError(f"grid {name_or_path} leaves {key} open: give {flag}")
    if (candidates or heads) and not template:
        raise BenchError(
            f"grid {name_or_path} sets its tasks and pairs: add methods in the grid file, not with --method/--head"
        )
    configs = configs_from_flags(
        tasks=_as_list(g.get("tasks", list(tasks))),
        pairs=_as_list(g.get("pairs", list(pairs))),
        methods=list(dict.fromkeys([*_as_list(g["methods"]), *candidates])),
        heads=[*_as_list(g.get("head", [])), *heads],
        target_weights=_as_list(g.get("target_weight", 0.7)),
        lenience=_as_list(g.get("lenience", 0.5)),
        cascade_rules=_as_list(g.get("cascade_rule", "opt")),
        cascade_alphas=_as_list(g.get("cascade_alpha", 0.5)),
        mix=g.get("mix", "prob"),
        params={k: _as_list(v) for k, v in (g.get("params") or {}).items()},
        data=g.get("data"),
        seed=g.get("seed", 0),
        draft_len=g.get("draft_len", 5),
        temperature=g.get("temperature", 1.0),
        max_new_tokens=g.get("max_new_tokens"),
        num_fewshot=g.get("num_fewshot"),
        split=g.get("split"),
        chat_template=g.get("chat_template", False),
        truncate_prompt=g.get("truncate_prompt", "none"),
        draft_policy=g.get("draft_policy"),
        device=device,
        dtype=dtype,
    )
    return configs, limit if limit is not None else g.get("limit")
