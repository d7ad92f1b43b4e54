"""From command-line flags or a grid file to the list of configurations to run.

A grid file names tasks, pairs, methods, their parameter values (``params``, or the older
top-level keys ``target_weight``, ``lenience``, ``cascade_rule``, ``cascade_alpha``, ``mix``) and
shared settings. ``sweep: true`` gives every method's swept parameters that the grid leaves open
the default sweep its verifier class declares. A grid that leaves out tasks or pairs (a template,
such as ``baselines``) takes them, and candidate methods with their own parameters, from the
command line. A setting given on the command line is applied when the grid leaves it open and
refused when the grid sets it: never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from bench.config import RunConfig, RunSettings, expand_methods
from bench.errors import BenchError
from bench.lossless import ACCEPT_ALL_METHOD, ANCHORS
from bench.registry import load_yaml
from bench.verifiers import VERIFIERS, verifier_class

# The settings a grid file may set, shared by all its configurations: RunSettings' fields.
SHARED_KEYS = tuple(f.name for f in fields(RunSettings))
# ``threads`` and ``batch_size`` set no configuration: they are the run's CPU threads per operator
# (`run --threads`) and examples decoded together (`run --batch-size`).
GRID_KEYS = {
    "tasks", "pairs", "methods", "limit", "head", "params", "sweep", "calibrate", "anchors", "threads", "batch_size",
    *SHARED_KEYS,
}  # fmt: skip


def param_aliases() -> tuple[str, ...]:
    """Verifier parameters with a flag and a grid key of their own besides --param: what the
    registered classes declare (``Verifier.aliases``)."""
    return tuple(dict.fromkeys(a for cls in VERIFIERS.values() for a in cls.aliases))


def configs_from_flags(
    *,
    tasks: Sequence[str],
    pairs: Sequence[str],
    methods: Sequence[str],
    heads: Sequence[str] = (),
    params: Mapping[str, Sequence[Any]] | None = None,
    settings: RunSettings = RunSettings(),
    sweep: bool = False,
    calibrate: bool = False,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
) -> list[RunConfig]:
    """Every task x pair x method x drafter configuration under ``settings``; heads may name
    {task} and {pair}. ``settings.drafter`` may name several drafters (a grid axis; ``ar`` runs
    once, it drafts nothing)."""
    out = []
    for pair in pairs:
        for task in tasks:
            expanded = expand_methods(
                methods,
                params=params,
                heads=[h.format(task=task, pair=pair) for h in heads],
                sweep=sweep,
                calibrate=calibrate,
            )
            out += [
                settings.config(task=task, pair=pair, method=m, params=p, head=h, drafter=d, device=device,
                                dtype=dtype, engine=engine)  # fmt: skip
                for d in settings.drafters()
                for m, p, h in expanded
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
    unknown = set(grid) - GRID_KEYS - set(param_aliases())
    if unknown:
        raise BenchError(
            f"grid {name_or_path}: unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(GRID_KEYS | set(param_aliases())))}"
        )
    return grid


def grid_params(grid: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The grid's parameter values: ``params`` and the alias keys together."""
    out = {k: _as_list(v) for k, v in (grid.get("params") or {}).items()}
    for key in param_aliases():
        if key in grid:
            if key in out:
                raise BenchError(f"grid sets {key} twice (as a key and under params); keep one")
            out[key] = _as_list(grid[key])
    return out


def configs_from_grid(
    name_or_path: str,
    *,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    tasks: Sequence[str] = (),
    pairs: Sequence[str] = (),
    candidates: Sequence[str] = (),
    heads: Sequence[str] = (),
    params: Mapping[str, Sequence[Any]] | None = None,
    settings: RunSettings | Mapping[str, Any] = RunSettings(),
    calibrate: bool | None = None,
) -> tuple[list[RunConfig], int | None]:
    """A grid's configurations, and its example limit.

    ``candidates`` (with their ``heads``) join a template grid's methods, and ``params`` (from
    --param and its aliases) go to the candidates; with a grid that names its methods, they go to
    the grid's methods unless the grid sets them. ``settings`` (given on the command line; a
    RunSettings, or a mapping of its names) apply where the grid leaves them open and are refused
    where it sets them. ``calibrate`` (--calibrate/--no-calibrate) overrides the grid's ``calibrate``
    key."""
    g = load_grid(name_or_path)
    params, settings = dict(params or {}), RunSettings.of(settings)
    template = "tasks" not in g or "pairs" not in g
    _check_given(name_or_path, g, template, tasks, pairs, candidates, heads, params, settings)
    shared = settings.over(RunSettings.of({k: g[k] for k in SHARED_KEYS if k in g}, f"grid {name_or_path}"))
    base: dict[str, Any] = dict(  # the keywords every call below shares
        tasks=_as_list(g.get("tasks", list(tasks))),
        pairs=_as_list(g.get("pairs", list(pairs))),
        settings=shared,
        sweep=bool(g.get("sweep", False)),
        calibrate=bool(g.get("calibrate", False)) if calibrate is None else calibrate,
        device=device,
        dtype=dtype,
        engine=engine,
    )
    methods, own = _as_list(g["methods"]), grid_params(g)
    grid_heads = _as_list(g.get("head", []))
    if template:
        configs = configs_from_flags(methods=methods, heads=grid_heads, params=own, **base)
        extra = [c for c in candidates if c not in methods]
        configs += configs_from_flags(methods=extra, heads=list(heads), params=params, **base) if extra else []
        if params and not extra:
            raise BenchError(
                f"--param {', '.join(params)}: grid {name_or_path}'s methods set their own sweeps; "
                "--param goes to a candidate (--method my.py:MyVerifier)"
            )
    else:
        configs = configs_from_flags(methods=methods, heads=grid_heads, params={**own, **params}, **base)
    return (with_anchors(configs) if g.get("anchors") else configs), g.get("limit")


def _check_given(
    name: str, g: Mapping[str, Any], template: bool, tasks: Sequence[str], pairs: Sequence[str],
    candidates: Sequence[str], heads: Sequence[str], params: Mapping[str, Any], settings: RunSettings,
) -> None:  # fmt: skip
    """Refuse what the command line gives that the grid fixes, or leaves open and needs: tasks and
    pairs, a template's candidates, settings and parameters the grid sets."""
    for key, given, flag in (("tasks", tasks, "--task"), ("pairs", pairs, "--pair")):
        if key in g and given:
            raise BenchError(f"grid {name} sets {key}; drop {flag} or edit the grid file")
        if key not in g and not given:
            raise BenchError(f"grid {name} leaves {key} open: give {flag}")
    if (candidates or heads) and not template:
        raise BenchError(f"grid {name} sets its tasks and pairs: add methods in the grid file, not with --method/--head")
    own = grid_params(g)
    clash = sorted({k for k in settings.given() if k in g} | ({k for k in params if k in own} if not template else set()))
    if clash:
        flags = ", ".join("--" + k.replace("_", "-") for k in clash)
        raise BenchError(f"grid {name} sets {', '.join(clash)}; drop {flags} or edit the grid file")


def with_anchors(configs: list[RunConfig], methods: Sequence[str] = ANCHORS) -> list[RunConfig]:
    """The configurations and, after them, the anchors of each one's drafts (``RunConfig.anchors``:
    ``sd`` and ``accept_all`` on the same drafts; ``methods``: which of the two) that none of them
    is already: a grid with ``anchors: true`` runs every point its families' frontiers hold
    (bench/lossless.py), and every run adds ``accept_all`` (``with_accept_all``)."""

    def key(c: RunConfig) -> RunConfig:  # a configuration with its drafts as they run
        drafts = c.drafts()
        return replace(c, draft_policy=drafts.policy, drafter=drafts.drafter)

    have = [key(c) for c in configs if verifier_class(c.method).name in ANCHORS]
    out = list(configs)
    for c in configs:
        for point in c.anchors():
            if point.method in methods and key(point) not in have:
                have.append(key(point))
                out.append(point)
    return out


def with_accept_all(configs: list[RunConfig]) -> list[RunConfig]:
    """The configurations and ``accept_all`` (keep every draft: the draft alone) on each one's drafts
    that none of them is already: the anchor every table and figure shows by default, so a reader
    sees where "accept everything" lands (``run --no-accept-all`` leaves it out)."""
    return with_anchors(configs, (ACCEPT_ALL_METHOD,))
