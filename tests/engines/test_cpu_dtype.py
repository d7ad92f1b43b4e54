"""The dtype a CPU run gets (issue 51 item 8): bf16 only where torch serves bf16 matmuls natively.

On an AVX2-only AMD EPYC a bf16 matmul of SmolLM2's MLP shape ran 3.1x slower than fp32, so a pair's
bf16 default there resolves to fp32 and an explicit bf16 request warns in one line. The predicate is
mocked both ways: the tests mean the same on any CPU.
"""

from __future__ import annotations

import pytest
import torch

from bench import pairs
from bench.pairs import PairSpec, pick_dtype

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees its own once-per-process lines."""
    monkeypatch.setattr(pairs, "_SAID", set())


def _spec(cpu: str) -> PairSpec:
    return PairSpec(name="p", kind="tiny", dtype={"cuda": "bfloat16", "cpu": cpu})


@pytest.mark.parametrize("serves", [False, True])
def test_a_float32_pair_stays_float32_whatever_the_cpu(monkeypatch, capsys, serves: bool) -> None:
    monkeypatch.setattr(pairs, "cpu_serves_bf16", lambda: serves)
    assert pick_dtype(_spec("float32"), CPU, None) == torch.float32
    assert capsys.readouterr().err == ""


def test_a_bf16_pair_loads_float32_on_a_cpu_without_bf16(monkeypatch, capsys) -> None:
    monkeypatch.setattr(pairs, "cpu_serves_bf16", lambda: False)
    assert pick_dtype(_spec("bfloat16"), CPU, None) == torch.float32
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "loading float32" in err and "_is_mkldnn_bf16_supported" in err


def test_a_bf16_pair_keeps_bf16_on_a_cpu_with_it(monkeypatch, capsys) -> None:
    monkeypatch.setattr(pairs, "cpu_serves_bf16", lambda: True)
    assert pick_dtype(_spec("bfloat16"), CPU, None) == torch.bfloat16
    assert pick_dtype(_spec("float32"), CPU, "bfloat16") == torch.bfloat16
    assert capsys.readouterr().err == ""


def test_asking_for_bf16_without_it_warns_in_one_line_once(monkeypatch, capsys) -> None:
    """The request is kept (no silent fallback); the line says why and what to use instead, once
    however many configurations resolve their dtype."""
    monkeypatch.setattr(pairs, "cpu_serves_bf16", lambda: False)
    for _ in range(3):
        assert pick_dtype(_spec("float32"), CPU, "bfloat16") == torch.bfloat16
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: --dtype bfloat16") and "--dtype float32" in err


def test_a_gpu_is_not_asked(monkeypatch) -> None:
    def fail() -> bool:
        raise AssertionError("the CPU predicate was read for a GPU")

    monkeypatch.setattr(pairs, "cpu_serves_bf16", fail)
    assert pick_dtype(_spec("float32"), torch.device("cuda"), None) == torch.bfloat16
