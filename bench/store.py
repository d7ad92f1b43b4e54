"""The results directory: one parquet dataset, written so that a crash loses nothing.

Each finished example is written at once as its own small parquet file
(``parts/<config_id>/<example>.parquet``, atomically: write then rename). When a configuration
finishes, its parts are compacted into ``<config_id>[.<shard>].parquet``. Readers take the union of
both and drop duplicates, so a kill at any moment, even during compaction, leaves no duplicate and
no lost row. Each configuration also has ``manifests/<config_id>.json`` with every setting.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import BenchError

KEY = ["config_id", "example_id"]


def _atomic_write_parquet(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _example_file(example_id: str) -> str:
    return hashlib.sha1(example_id.encode()).hexdigest()[:16] + ".parquet"


class ResultStore:
    """Rows of one results directory; ``shard`` names this writer's files (rank or job index)."""

    def __init__(self, root: Path, shard: str = "") -> None:
        self.root = Path(root)
        self.shard = shard
        self.root.mkdir(parents=True, exist_ok=True)

    def _parts(self, config_id: str) -> Path:
        return self.root / "parts" / config_id

    def _compacted(self, config_id: str) -> Path:
        suffix = f".{self.shard}" if self.shard else ""
        return self.root / f"{config_id}{suffix}.parquet"

    def done_ids(self, config_id: str) -> set[str]:
        """Example ids already written for a configuration, by any writer."""
        files = list(self.root.glob(f"{config_id}*.parquet")) + list(self._parts(config_id).glob("*.parquet"))
        done: set[str] = set()
        for f in files:
            done.update(pd.read_parquet(f, columns=["example_id"])["example_id"].astype(str))
        return done

    def append(self, row: dict[str, Any]) -> None:
        """Write one finished example now."""
        parts = self._parts(row["config_id"])
        parts.mkdir(parents=True, exist_ok=True)
        _atomic_write_parquet(pd.DataFrame([row]), parts / _example_file(str(row["example_id"])))

    def compact(self, config_id: str) -> None:
        """Fold this writer's parts (and its earlier compacted file) into one file."""
        parts = sorted(self._parts(config_id).glob("*.parquet"))
        if not parts:
            return
        target = self._compacted(config_id)
        frames = [pd.read_parquet(p) for p in ([target] if target.exists() else []) + parts]
        frame = pd.concat(frames, ignore_index=True).drop_duplicates(subset=KEY, keep="first")
        _atomic_write_parquet(frame, target)
        for p in parts:
            p.unlink()
        try:
            self._parts(config_id).rmdir()
        except OSError:
            pass

    def write_manifest(self, config_id: str, manifest: dict[str, Any]) -> None:
        folder = self.root / "manifests"
        folder.mkdir(exist_ok=True)
        path = folder / f"{config_id}.json"
        existing = read_manifest(path)
        if existing is not None and existing["settings"] != manifest["settings"]:
            raise BenchError(f"{path} records other settings for this configuration; use another --output-dir")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        os.replace(tmp, path)


def read_manifest(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def load_results(root: Path | str) -> pd.DataFrame:
    """Every row of a results directory (all shards, compacted or not), without duplicates."""
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"results directory {root} does not exist; run `diversed-bench run` first")
    files = sorted(root.glob("*.parquet")) + sorted(root.glob("parts/*/*.parquet"))
    if not files:
        raise BenchError(f"no results in {root}; run `diversed-bench run --output-dir {root}` first")
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return frame.drop_duplicates(subset=KEY, keep="first").reset_index(drop=True)
