"""The results directory: one parquet dataset, written so that a crash loses nothing.

Each finished example (or batch of examples decoded together) is written at once as its own small
parquet file (``parts/<config_id>/<writer>/<example>.parquet``, atomically: write then rename). When a
configuration finishes, a writer compacts its own parts into ``<config_id>.<writer>.parquet``.
Readers take the union of everything and drop duplicates, so a kill at any moment, even during
compaction, leaves no duplicate and no lost row. Writers (processes of one job, or jobs of a
sharded grid) never touch each other's files. Each writer records
``manifests/<config_id>.<writer>.json`` with every setting, library versions and device.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.atomic import write_atomic
from bench.errors import BenchError

KEY = ["config_id", "example_id"]
# Token traces (``run --trace``) live beside the rows in their own dataset, one row per token.
TRACES = "traces"
TRACE_KEY = [*KEY, "position"]
# Calibrated sweeps' records (bench.calibration), one JSON file per family and panel.
CALIBRATION = "calibration"
# Settings every configuration of one comparison shares: rows are paired with their ar run, and
# grouped into report panels, on all of them. Each row carries them as columns.
SHARED_SETTINGS = (
    "task",
    "pair",
    "temperature",
    "max_new_tokens",
    "seed",
    "data",
    "num_fewshot",
    "split",
    "chat_template",
    "device",
    "dtype",
    "engine",
    "truncate_prompt",
)
# Version of the rows' columns and of the configuration ids. Reports read the versions in
# ``READ_SCHEMAS``; a run adds rows only to a directory of its own version (another version's ids
# differ, so its configurations would run again beside the old ones).
SCHEMA = 6
READ_SCHEMAS = (3, 4, 5, 6)
# Rows of schema 2 and older on Gemma 3 came from engines that attended over the whole context on
# its sliding-window layers: their numbers are wrong, and the refusal says so.
FULL_WINDOW_SCHEMAS = (1, 2)


def _atomic_write_parquet(frame: pd.DataFrame, path: Path) -> None:
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def _atomic_write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """Rows as a parquet file, straight from the dicts: pandas' frame and its metadata cost two
    thirds of each part's write, and read back the same (test_store)."""
    write_atomic(path, lambda tmp: pq.write_table(pa.Table.from_pylist(rows), tmp))


def _example_file(example_id: str) -> str:
    return hashlib.sha1(example_id.encode()).hexdigest()[:16] + ".parquet"


class ResultStore:
    """Rows of one results directory; ``writer`` names this process's files (e.g. ``0of1``)."""

    def __init__(self, root: Path, writer: str = "0of1") -> None:
        self.root = Path(root)
        self.writer = writer
        self.rows_written = 0  # by this process: what an interrupted run reports as saved
        self.root.mkdir(parents=True, exist_ok=True)

    def _parts(self, config_id: str) -> Path:
        return self.root / "parts" / config_id / self.writer

    def check_writable(self) -> None:
        """Refuse to add rows beside rows of an older version: its configuration ids differ, so the
        same configurations would run again next to the old ones."""
        for f in sorted(self.root.glob("*.parquet")) + sorted(self.root.glob("parts/*/*/*.parquet")):
            try:
                found = set(pd.read_parquet(f, columns=["schema"])["schema"].unique().tolist())
            except Exception:  # not ours or unreadable: the readers say so with the reason
                continue
            if found != {SCHEMA}:
                raise BenchError(
                    f"{self.root} holds rows of an older diversed-bench version (schema "
                    f"{', '.join(map(str, sorted(found)))}; this one writes {SCHEMA}): reports still read them, "
                    "but run into a new --output-dir"
                )

    def done_ids(self, config_id: str) -> set[str]:
        """Example ids already written for a configuration, by any writer."""
        files = list(self.root.glob(f"{config_id}.*.parquet")) + list(
            self.root.glob(f"parts/{config_id}/*/*.parquet")
        )
        done: set[str] = set()
        for f in files:
            done.update(pd.read_parquet(f, columns=["example_id"])["example_id"].astype(str))
        return done

    def append(self, row: dict[str, Any], trace: pd.DataFrame | None = None) -> None:
        """Write one finished example now."""
        self.append_batch([row], trace)

    def append_batch(self, rows: list[dict[str, Any]], trace: pd.DataFrame | None = None) -> None:
        """Write the examples of one decoded batch now, in one file: a kill leaves all of them or
        none, so a resumed run decodes the same batches as an uninterrupted one. Their token trace,
        if any, is written first: an example counts as done only once its rows exist, and a rerun
        overwrites a trace left without rows."""
        name = _example_file(str(rows[0]["example_id"]))
        if trace is not None:
            traces = self.root / TRACES / "parts" / rows[0]["config_id"] / self.writer
            traces.mkdir(parents=True, exist_ok=True)
            _atomic_write_parquet(trace, traces / name)
        parts = self._parts(rows[0]["config_id"])
        parts.mkdir(parents=True, exist_ok=True)
        _atomic_write_rows(rows, parts / name)
        self.rows_written += len(rows)

    def compact(self, config_id: str) -> None:
        """Fold this writer's parts (and its earlier compacted file) into one file, traces too."""
        _compact(self.root / TRACES, config_id, self.writer, TRACE_KEY)
        _compact(self.root, config_id, self.writer, KEY)

    def write_manifest(self, config_id: str, manifest: dict[str, Any]) -> None:
        folder = self.root / "manifests"
        folder.mkdir(exist_ok=True)
        path = folder / f"{config_id}.{self.writer}.json"
        text = json.dumps({**manifest, "writer": self.writer}, indent=2, sort_keys=True, default=str)
        write_atomic(path, lambda tmp: tmp.write_text(text))
        check_consistency(self.root)

    def calibration(self, key: str) -> dict[str, Any] | None:
        """A calibrated sweep's record (bench.calibration), if one was written."""
        path = self.root / CALIBRATION / f"{key}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def write_calibration(self, record: dict[str, Any]) -> dict[str, Any]:
        """Keep a calibration's record unless another process (a shard) wrote one first: then
        return that one, so every writer runs the same values."""
        folder = self.root / CALIBRATION
        folder.mkdir(exist_ok=True)
        path = folder / f"{record['key']}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
        try:
            os.link(tmp, path)  # fails if the record exists: the first writer's stands
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return json.loads(path.read_text())


def _compact(root: Path, config_id: str, writer: str, key: list[str]) -> None:
    folder = root / "parts" / config_id / writer
    parts = sorted(folder.glob("*.parquet"))
    if not parts:
        return
    target = root / f"{config_id}.{writer}.parquet"
    frames = [pd.read_parquet(p) for p in ([target] if target.exists() else []) + parts]
    frame = pd.concat(frames, ignore_index=True).drop_duplicates(subset=key, keep="first")
    _atomic_write_parquet(frame, target)
    for p in parts:
        p.unlink()
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:
            pass


def load_traces(root: Path | str) -> pd.DataFrame:
    """Every token trace of a results directory (empty when it was run without --trace)."""
    folder = Path(root) / TRACES
    files = sorted(folder.glob("*.parquet")) + sorted(folder.glob("parts/*/*/*.parquet"))
    if not files:
        return pd.DataFrame()
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return _canonical(frame.drop_duplicates(subset=TRACE_KEY, keep="first"), TRACE_KEY)


def manifests(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((Path(root) / "manifests").glob("*.json"))]


def check_consistency(root: Path) -> None:
    """Refuse a results directory whose writers disagree.

    Two writers of one configuration must have run the same library versions. Shards of one
    sharded run (writers ``iofk`` with k > 1) must agree on everything but the shard: a shard that
    ran another seed or draft length would leave two half-configurations that look complete.
    """
    found = manifests(root)
    by_config: dict[str, dict[str, Any]] = {}
    for m in found:
        first = by_config.setdefault(m["config_id"], m)
        if first["versions"] != m["versions"]:
            raise BenchError(
                f"configuration {m['label']} ({m['config_id']}) was run with different library versions by writers "
                f"{first['writer']} ({first['versions']}) and {m['writer']} ({m['versions']}); rerun one of them"
            )
    sharded: dict[str, dict[str, Any]] = {}
    for m in found:
        if m["writer"].endswith("of1"):
            continue
        key = json.dumps(
            {k: v for k, v in m["settings"].items() if k not in ("seed", "draft_len")}, sort_keys=True
        )
        other = sharded.setdefault(key, m)
        for field in ("seed", "draft_len"):
            if other["settings"][field] != m["settings"][field]:
                raise BenchError(
                    f"shards of {m['label']} disagree on {field}: {other['settings'][field]} (writer "
                    f"{other['writer']}) vs {m['settings'][field]} (writer {m['writer']}); rerun the odd shard"
                )


def _read_rows(path: Path) -> pd.DataFrame:
    """One results file, refused with the reason when it is not ours or from another schema."""
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise BenchError(
            f"{path} is not a readable parquet file ({type(exc).__name__}); move it out of the results directory"
        ) from None
    schema = frame["schema"].unique().tolist() if "schema" in frame else []
    if not schema or not set(schema) <= set(READ_SCHEMAS):
        found = "no schema column" if not schema else f"schema {schema}"
        if set(schema) & set(FULL_WINDOW_SCHEMAS) and _holds_gemma3(frame):
            raise BenchError(
                f"{path} holds Gemma 3 rows decoded with full attention on its sliding-window layers "
                f"({found}): their numbers are wrong; re-run them into a new --output-dir"
            )
        raise BenchError(
            f"{path} holds rows of another diversed-bench version ({found}, this one reads schemas "
            f"{', '.join(map(str, READ_SCHEMAS))}: "
            "configuration ids and columns differ, see docs/results-schema.md); re-run into a new --output-dir"
        )
    return frame


def _holds_gemma3(frame: pd.DataFrame) -> bool:
    """Whether any row's pair is Gemma 3: the registry's ``gemma3`` or a pair file naming it."""
    pairs = frame["pair"].astype(str) if "pair" in frame else pd.Series([], dtype=str)
    return bool(pairs.str.contains("gemma3|gemma-3", case=False).any())


def load_results(root: Path | str) -> pd.DataFrame:
    """Every row of a results directory (all shards, compacted or not), without duplicates."""
    root = Path(root)
    if root.is_file():
        raise BenchError(f"{root} is a file; give the results directory (the --output-dir of `run`)")
    if not root.is_dir():
        raise BenchError(f"results directory {root} does not exist; run `diversed-bench run` first")
    files = sorted(root.glob("*.parquet")) + sorted(root.glob("parts/*/*/*.parquet"))
    if not files:
        raise BenchError(f"no results in {root}; run `diversed-bench run --output-dir {root}` first")
    check_consistency(root)
    frame = pd.concat([_read_rows(f) for f in files], ignore_index=True)
    return _canonical(frame.drop_duplicates(subset=KEY, keep="first"), KEY)


def _canonical(frame: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Rows in one order, by ``key``, whatever files they came from: the bootstrap resamples rows by
    position, so rows in the order of their files (named by a hash of a batch's first example)
    gave other intervals at another --batch-size, shard count or resume."""
    return frame.sort_values(key, kind="stable").reset_index(drop=True)


def merge(sources: list[Path], output: Path) -> int:
    """Copy the rows and manifests of several results directories (shards) into one."""
    import shutil

    output.mkdir(parents=True, exist_ok=True)
    (output / "manifests").mkdir(exist_ok=True)
    for source in sources:
        rows = load_results(source)
        for config_id, g in rows.groupby("config_id"):
            _atomic_write_parquet(
                g,
                output
                / f"{config_id}.merged-{hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:8]}.parquet",
            )
        traces = load_traces(source)
        for config_id, g in traces.groupby("config_id") if len(traces) else ():
            (output / TRACES).mkdir(exist_ok=True)
            _atomic_write_parquet(
                g,
                output
                / TRACES
                / f"{config_id}.merged-{hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:8]}.parquet",
            )
        for m in (source / "manifests").glob("*.json"):
            shutil.copy(m, output / "manifests" / m.name)
    return len(load_results(output))
