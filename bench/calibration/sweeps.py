"""Calibrated sweeps in a run: placeholder configurations -> configurations at chosen values.

A grid with ``calibrate: true`` (``--grid baselines``) leaves each calibrated family's parameter
open (``CALIBRATED``). Before anything is judged, this module decodes, per task and panel, a few
short examples that are not judged (``calibration_examples``): lossless SD once, each fixed-value
candidate once, and each family along its declared path (``search``), and replaces every
placeholder by the family at the values found. The search's record (targets, values, evaluations,
examples) is written into the results directory (``calibration/<key>.json``) and each chosen
configuration's manifest points at it; a rerun, a resumed run or another shard reads the record
back instead of searching again, so the configurations (and their ids) are the same.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench.build import build_decoder
from bench.calibration.search import STILL, calibrate_path
from bench.config import RunConfig
from bench.distributions import Sampling
from bench.engines import EagerEngine
from bench.errors import BenchError
from bench.store import SHARED_SETTINGS
from bench.tasks import Example, Task, resolve_task, select
from bench.verifiers import CALIBRATED, Calibration, verifier_class

# Levels per family (lossless SD's acceptance to the family's highest, ends included), calibration
# examples per task and panel, and their token budget (the task's when shorter).
LEVELS = 5
EXAMPLES = 16
BUDGET = 64


def pending(cfg: RunConfig) -> bool:
    """Whether a configuration still waits for its calibrated values."""
    return any(v is CALIBRATED for v in cfg.params.values())


def _path(cfg: RunConfig) -> Calibration:
    path = verifier_class(cfg.method).calibration
    assert path is not None  # only a class that declares one gets a placeholder (bench.config)
    return path


def at(cfg: RunConfig, x: float) -> RunConfig:
    """The placeholder's configuration at path position ``x``."""
    fixed = {k: v for k, v in cfg.params.items() if v is not CALIBRATED}
    return replace(cfg, params={**fixed, **_path(cfg).values(x)})


@dataclass(frozen=True)
class Panel:
    """The settings a comparison shares (one task, one panel): calibration is per panel."""

    settings: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, cfg: RunConfig) -> Panel:
        resolved = at(cfg, _path(cfg).top).resolve() if pending(cfg) else cfg.resolve()
        keys = (*SHARED_SETTINGS, "draft_len")
        return cls(tuple((k, getattr(resolved, k)) for k in keys))

    def get(self, key: str) -> Any:
        return dict(self.settings)[key]


def calibration_examples(
    cfg: RunConfig, limit: int | None, count: int | None = None
) -> list[tuple[str, Example]]:
    """(split, example) pairs no run of this panel judges: the task's few-shot split without its
    exemplars first, then the end of the evaluation split's seeded order, past the judged prefix."""
    count = EXAMPLES if count is None else count
    cfg = cfg.resolve() if not pending(cfg) else at(cfg, _path(cfg).top).resolve()
    spec = resolve_task(cfg.task)
    out: list[tuple[str, Example]] = []
    other = spec.dataset.get("fewshot_split")
    if other and other != cfg.split:
        task = Task(spec, cfg.data, num_fewshot=cfg.num_fewshot, split=other)  # type: ignore[arg-type]
        rows = task.rows()
        shots = set(select(len(rows), cfg.num_fewshot, spec.fewshot_seed)) if cfg.num_fewshot else set()
        picked = [i for i in select(len(rows), None, cfg.seed) if i not in shots][:count]
        out = [(other, Example(task.example_id(i, rows[i]), rows[i], task.render(rows[i]))) for i in picked]
    if len(out) < count:
        judged = Task(spec, cfg.data, num_fewshot=cfg.num_fewshot, split=cfg.split)  # type: ignore[arg-type]
        order = judged.examples(None, cfg.seed)
        free = order[limit:] if limit is not None else []
        out += [(str(cfg.split), e) for e in free[len(free) - (count - len(out)) :]] if free else []
    if not out:
        raise BenchError(
            f"calibration of {cfg.task}: no example left outside the judged ones (split {cfg.split}, "
            f"--limit {limit}); lower --limit, or run fixed sweeps with --no-calibrate"
        )
    return out


def check_disjoint(record: dict[str, Any], cfg: RunConfig, limit: int | None) -> None:
    """Refuse a reused calibration whose examples this run would judge (a raised --limit)."""
    split = str(cfg.split)
    mine = {eid for s, eid in record["examples"] if s == split}
    if not mine:
        return
    judged = {
        e.example_id for e in Task(resolve_task(cfg.task), cfg.data, split=split).examples(limit, cfg.seed)
    }
    if mine & judged:
        raise BenchError(
            f"calibration {record['key']} used {len(mine & judged)} {cfg.task} examples that --limit {limit} now "
            "judges; keep the earlier --limit or run into a new --output-dir"
        )


class Calibrator:
    """Decodes a panel's calibration examples for any configuration; results cached per setting."""

    def __init__(
        self, runner: Any, panel_cfg: RunConfig, limit: int | None, log: Callable[[str], None]
    ) -> None:
        self.runner, self.log = runner, log
        self.examples = calibration_examples(panel_cfg, limit)
        self.decodes, self.started = 0, time.perf_counter()
        self._seen: dict[str, float] = {}

    def acceptance(self, cfg: RunConfig) -> float:
        """Pooled acceptance (accepted / drafted) of ``cfg`` on the calibration examples."""
        cfg = replace(cfg, device=self.runner.device or cfg.device).resolve()
        if cfg.config_id not in self._seen:
            pair = self.runner.pair(cfg)
            decoder = build_decoder(
                pair,
                cfg.method,
                cfg.params,
                head=cfg.head,
                draft_len=cfg.draft_len,
                sampling=Sampling(cfg.temperature),
                engine=EagerEngine,
                draft_policy=cfg.draft_policy,
            )
            examples = [e for _, e in self.examples]
            prompts = self.runner.prompts(cfg, examples)
            budget = min(int(cfg.max_new_tokens or BUDGET), BUDGET)
            gens = decoder.generate_batch(
                [prompts[e.example_id][0] for e in examples], budget, list(range(len(examples)))
            )
            drafted = sum(g.stats.drafted_tokens for g in gens)
            self._seen[cfg.config_id] = sum(g.stats.accepted_tokens for g in gens) / max(drafted, 1)
            self.decodes += 1
        return self._seen[cfg.config_id]


def record_key(cfg: RunConfig) -> str:
    """What a calibration depends on: the family (method and fixed parameters), its panel and the
    calibration's own settings; not the candidates, so adding one reuses the baselines' values."""
    fixed = {k: v for k, v in cfg.params.items() if v is not CALIBRATED}
    text = json.dumps(
        {
            "panel": Panel.of(cfg).settings,
            "method": verifier_class(cfg.method).name,
            "fixed": fixed,
            "head": cfg.head,
            "draft_policy": cfg.draft_policy,
            "path": asdict(_path(cfg)),
            "levels": LEVELS,
            "examples": EXAMPLES,
            "budget": BUDGET,
        },
        sort_keys=True,
        default=str,
    )
    name = f"{cfg.task}-{verifier_class(cfg.method).name}"
    return f"{name}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def search_family(cfg: RunConfig, calib: Calibrator, low: float, extra: list[float]) -> dict[str, Any]:
    """The record of one family's calibration: levels found, evaluations, examples."""
    path = _path(cfg)
    before = calib.decodes
    levels, search = calibrate_path(path, lambda x: calib.acceptance(at(cfg, x)), low, LEVELS, extra)
    return {
        "key": record_key(cfg),
        "family": verifier_class(cfg.method).name,
        "path": asdict(path),
        "sd_acceptance": low,
        "candidate_levels": extra,
        "levels": [asdict(level) for level in levels],
        "evaluations": sorted(search.seen.items()),
        "examples": [[split, e.example_id] for split, e in calib.examples],
        "budget": min(int(Panel.of(cfg).get("max_new_tokens") or BUDGET), BUDGET),
        "decodes": calib.decodes - before,
    }


def _candidates(group: list[RunConfig]) -> list[RunConfig]:
    """The fixed-value configurations judged against the baselines: neither ar, sd nor a baseline."""
    out = []
    for c in group:
        cls = verifier_class(c.method)
        if not pending(c) and cls.uses_draft and not cls.baseline and cls.name != "sd":
            out.append(c)
    return out


def calibrate(
    configs: list[RunConfig], runner: Any, limit: int | None, log: Callable[[str], None] = print
) -> tuple[list[RunConfig], dict[str, dict[str, Any]]]:
    """Every placeholder replaced by its family at the calibrated values (found, or read back from
    the results directory), and the manifest entry of each chosen configuration by its id."""
    out = [c for c in configs if not pending(c)]
    notes: dict[str, dict[str, Any]] = {}
    panels: dict[Panel, list[RunConfig]] = {}
    for c in configs:
        panels.setdefault(Panel.of(c), []).append(c)
    for group in panels.values():
        todo = [c for c in group if pending(c)]
        if not todo:
            continue
        # Candidates (fixed values, or calibrated themselves) first: their range becomes levels.
        todo.sort(key=lambda c: verifier_class(c.method).baseline)
        calib: Calibrator | None = None
        extra: list[float] = []
        for cfg in todo:
            record = runner.store.calibration(record_key(cfg))
            if record is None:
                if calib is None:
                    calib = Calibrator(runner, cfg, limit, log)
                    sd = replace(
                        at(cfg, _path(cfg).top), method="sd", params={}, draft_policy=None, head=None
                    )
                    low = calib.acceptance(sd)
                    extra = sorted({*extra, *(round(calib.acceptance(c), 4) for c in _candidates(group))})
                record = runner.store.write_calibration(search_family(cfg, calib, low, extra))
            else:
                log(
                    f"{cfg.task} | {verifier_class(cfg.method).name}: calibrated values read back ({record['key']})"
                )
            check_disjoint(record, at(cfg, _path(cfg).top).resolve(), limit)
            chosen = _chosen(cfg, record, log)
            if not verifier_class(cfg.method).baseline:
                extra = sorted(
                    {
                        *extra,
                        *(round(lv["acceptance"], 4) for lv in record["levels"] if lv["value"] is not None),
                    }
                )
            for level, c in chosen:
                out.append(c)
                cid = (
                    replace(c, device=runner.device or c.device, engine=runner.engine_name)
                    .resolve()
                    .config_id
                )
                notes[cid] = {
                    "calibration": {
                        "record": record["key"],
                        "target": level["target"],
                        "calibration_acceptance": level["acceptance"],
                    }
                }
        if calib is not None:
            log(
                f"{group[0].task}: calibration took {calib.decodes} short decodes of {len(calib.examples)} "
                f"examples ({time.perf_counter() - calib.started:.0f} s)"
            )
    return out, notes


def _chosen(
    cfg: RunConfig, record: dict[str, Any], log: Callable[[str], None]
) -> list[tuple[dict[str, Any], RunConfig]]:
    """The record's reached levels as configurations; one line per level the family cannot reach."""
    name, out = verifier_class(cfg.method).name, []
    for level in record["levels"]:
        if level["value"] is None and level["note"].startswith(STILL):
            log(f"{cfg.task} | {name}: {level['note']}: one point")
        elif level["value"] is None:
            log(f"{cfg.task} | {name}: cannot reach acceptance {level['target']:.1%}: {level['note']}")
        else:
            out.append((level, at(cfg, level["value"])))
    return out
