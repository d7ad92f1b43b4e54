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

from bench.build import decoder_for
from bench.calibration.search import STILL, calibrate_path
from bench.config import RunConfig
from bench.errors import BenchError
from bench.lossless import ANCHORS
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
        task = Task(spec, cfg.data_source, num_fewshot=cfg.num_fewshot, split=other)
        rows = task.rows()
        shots = set(select(len(rows), cfg.num_fewshot, spec.fewshot_seed)) if cfg.num_fewshot else set()
        picked = [i for i in select(len(rows), None, cfg.seed) if i not in shots][:count]
        out = [(other, Example(task.example_id(i, rows[i]), rows[i], task.render(rows[i]))) for i in picked]
    if len(out) < count:
        judged = Task(spec, cfg.data_source, num_fewshot=cfg.num_fewshot, split=cfg.split)
        order = judged.examples(None, cfg.seed)
        free = order[limit:] if limit is not None else []
        out += [(str(cfg.split), e) for e in free[max(0, len(free) - (count - len(out))) :]]
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
        e.example_id for e in Task(resolve_task(cfg.task), cfg.data_source, split=split).examples(limit, cfg.seed)
    }
    if mine & judged:
        raise BenchError(
            f"calibration {record['key']} used {len(mine & judged)} {cfg.task} examples that --limit {limit} now "
            "judges; keep the earlier --limit or run into a new --output-dir"
        )


class Calibrator:
    """Decodes a panel's calibration examples for any configuration; results cached per setting."""

    def __init__(self, runner: Any, panel_cfg: RunConfig, limit: int | None) -> None:
        self.runner = runner
        self.examples = calibration_examples(panel_cfg, limit)
        self.decodes, self.started = 0, time.perf_counter()
        self._seen: dict[str, float] = {}

    def acceptance(self, cfg: RunConfig) -> float:
        """Pooled acceptance (accepted / drafted) of ``cfg`` on the calibration examples."""
        cfg = replace(cfg, device=self.runner.device or cfg.device).resolve()
        if cfg.config_id not in self._seen:
            pair = self.runner.pair(cfg)
            decoder = decoder_for(cfg, pair)  # eager; run's own decoder, drafter and all
            examples = [e for _, e in self.examples]
            prompts = self.runner.prompts(cfg, examples, decoder)
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
    """The fixed-value configurations judged against the baselines: neither ar, an anchor
    (bench/lossless.py) nor a baseline."""
    out = []
    for c in group:
        cls = verifier_class(c.method)
        if not pending(c) and cls.uses_draft and not cls.baseline and cls.name not in ANCHORS:
            out.append(c)
    return out


class PanelSearch:
    """One panel's calibration: its decodes, SD's level and the candidates' levels, each made once
    and only when a family has no record yet."""

    def __init__(self, group: list[RunConfig], runner: Any, limit: int | None, log: Callable[[str], None]):
        self.group, self.runner, self.limit, self.log = group, runner, limit, log
        self.calib: Calibrator | None = None
        self.low = 0.0
        self.extra: list[float] = []  # the candidates' acceptances: levels for the baselines

    def record(self, cfg: RunConfig) -> dict[str, Any]:
        """The family's record: read back, or searched now and written."""
        name = verifier_class(cfg.method).name
        record = self.runner.store.calibration(record_key(cfg))
        if record is None:
            self._start(cfg)
            assert self.calib is not None
            record = self.runner.store.write_calibration(search_family(cfg, self.calib, self.low, self.extra))
        else:
            self.log(f"{cfg.task} | {name}: calibrated values read back ({record['key']})")
        check_disjoint(record, at(cfg, _path(cfg).top).resolve(), self.limit)
        if not verifier_class(cfg.method).baseline:
            reached = (lv["acceptance"] for lv in record["levels"] if lv["value"] is not None)
            self.extra = sorted({*self.extra, *(round(a, 4) for a in reached)})
        return record

    def _start(self, cfg: RunConfig) -> None:
        """The first search of the panel decodes SD and the fixed-value candidates."""
        if self.calib is not None:
            return
        self.calib = Calibrator(self.runner, cfg, self.limit)
        sd = replace(at(cfg, _path(cfg).top), method="sd", params={}, draft_policy=None, head=None)
        self.low = self.calib.acceptance(sd)
        fixed = (round(self.calib.acceptance(c), 4) for c in _candidates(self.group))
        self.extra = sorted({*self.extra, *fixed})

    def close(self) -> None:
        if self.calib is not None:
            self.log(
                f"{self.group[0].task}: calibration took {self.calib.decodes} short decodes of "
                f"{len(self.calib.examples)} examples ({time.perf_counter() - self.calib.started:.0f} s)"
            )


def calibrate(
    configs: list[RunConfig], runner: Any, limit: int | None, log: Callable[[str], None] = print
) -> tuple[list[RunConfig], dict[str, dict[str, Any]]]:
    """Every placeholder replaced, in place, by its family at the calibrated values (found, or read
    back from the results directory), and the manifest entry of each chosen configuration by id."""
    panels = [Panel.of(c) for c in configs]
    searches = {
        panel: PanelSearch([c for c, p in zip(configs, panels) if p == panel], runner, limit, log)
        for panel, c in zip(panels, configs)
        if pending(c)
    }
    # Candidates (fixed, or calibrated themselves) before the baselines: their levels are added.
    order = sorted((i for i, c in enumerate(configs) if pending(c)), key=lambda i: _is_baseline(configs[i]))
    records = {i: searches[panels[i]].record(configs[i]) for i in order}
    for search in searches.values():
        search.close()
    out: list[RunConfig] = []
    notes: dict[str, dict[str, Any]] = {}
    for i, cfg in enumerate(configs):
        if i not in records:
            out.append(cfg)
            continue
        for level, chosen in _chosen(cfg, records[i], log):
            out.append(chosen)
            resolved = replace(
                chosen, device=runner.device or chosen.device, engine=runner.engine_name
            ).resolve()
            entry = {
                "record": records[i]["key"],
                "target": level["target"],
                "calibration_acceptance": level["acceptance"],
            }
            notes[resolved.config_id] = {"calibration": entry}
    return out, notes


def _is_baseline(cfg: RunConfig) -> bool:
    return verifier_class(cfg.method).baseline


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
