"""The target's features for EAGLE training, kept on disk in half precision and read lazily.

Why: every position carries the three fused layer states (3H) and every response position the
final normed state (H); in fp32 in memory that is 9 KB a position for SmolLM2, and a corpus of a
few hundred thousand response tokens (plus its prompts) no longer fits in 24 GB. So each batch
of generated sequences becomes one shard: a small ``.pt`` with the tokens, and two fp16 ``.npy``
arrays that are memory-mapped when read. A record keeps views into them; ``materialise`` turns
the ones a training step needs into float tensors. Memory holds the step's batch and what the
operating system caches, not the corpus.

A shard is complete when its ``.pt`` exists: the arrays are written first, each to a temporary
file renamed into place, so a killed run leaves no half shard. Records are keyed by their
prompt's ``source:row``, so runs over different subsets of one prompts file share one folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

Record = dict[str, Any]


def key(prompt: dict[str, Any]) -> str:
    """A prompt's stable name in the shards: its source and row (scripts/eagle_prompts.py)."""
    return f"{prompt.get('source', 'prompts')}:{prompt.get('row', prompt['prompt'])}"


def _save_array(x: torch.Tensor, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, x.to(torch.float16).cpu().numpy())
    os.replace(tmp, path)


def write_shard(folder: Path, name: str, rows: dict[str, Record]) -> None:
    """One shard from full records (``feats`` [n - 1, 3H] and ``final`` [n - 1, H] tensors): the
    features of every position, the final state from the last prompt position on (the loss reads
    it nowhere else), both fp16."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = list(rows)
    feats = torch.cat([rows[k]["feats"] for k in keys])
    final = torch.cat([rows[k]["final"][rows[k]["prompt_len"] - 1 :] for k in keys])
    _save_array(feats, folder / f"{name}.feats.npy")
    _save_array(final, folder / f"{name}.final.npy")
    meta = [{"key": k, "prompt_len": rows[k]["prompt_len"], "ids": rows[k]["ids"], "argmax": rows[k]["argmax"]} for k in keys]
    tmp = folder / f"{name}.pt.tmp"
    torch.save(meta, tmp)
    os.replace(tmp, folder / f"{name}.pt")


def read_shards(folder: Path) -> dict[str, Record]:
    """Every complete shard's records, with ``feats`` and ``final`` as fp16 memory-mapped views
    (``final`` starts at the last prompt position)."""
    out: dict[str, Record] = {}
    for meta_path in sorted(folder.glob("*.pt")):
        out.update(read_shard(folder, meta_path.name[: -len(".pt")]))
    return out


def read_shard(folder: Path, stem: str) -> dict[str, Record]:
    """One shard's records (see ``read_shards``)."""
    feats = np.load(folder / f"{stem}.feats.npy", mmap_mode="r")
    final = np.load(folder / f"{stem}.final.npy", mmap_mode="r")
    out: dict[str, Record] = {}
    at = fin = 0
    for m in torch.load(folder / f"{stem}.pt", weights_only=False):
        n, resp = len(m["ids"]) - 1, len(m["ids"]) - m["prompt_len"]
        out[m["key"]] = {**m, "feats": feats[at : at + n], "final": final[fin : fin + resp]}
        at, fin = at + n, fin + resp
    return out


def materialise(r: Record, dtype: torch.dtype = torch.float32) -> Record:
    """A record with ``feats`` and ``final`` as tensors of ``dtype``, ``final`` zero before the last
    prompt position (no loss reads those positions). Records already in memory pass through."""
    if isinstance(r["feats"], torch.Tensor):
        return r
    feats = torch.from_numpy(np.array(r["feats"])).to(dtype)
    tail = torch.from_numpy(np.array(r["final"])).to(dtype)
    final = torch.zeros(feats.shape[0], tail.shape[1], dtype=dtype)
    final[r["prompt_len"] - 1 :] = tail
    return {**r, "feats": feats, "final": final}


def trim(r: Record, context: int) -> Record:
    """A record whose prompt keeps only its last ``context`` positions (0: all). RoPE makes the
    head's scores depend on distances only, so this is exactly a head that attends to the last
    ``context`` prompt positions; training cost falls with the sequence (the T x T attention
    quadratically). The response and every loss position are kept."""
    cut = max(0, r["prompt_len"] - context) if context else 0
    if not cut:
        return r
    out = {**r, "ids": r["ids"][cut:], "argmax": r["argmax"][cut:], "feats": r["feats"][cut:], "prompt_len": r["prompt_len"] - cut}
    if len(r["final"]) == len(r["feats"]):  # in memory: every position's (on disk: from the prompt's last on)
        out["final"] = r["final"][cut:]
    return out
