"""The compiled engine's terminal: the harness's own lines (what a compile should cost, where it
is cached, what it took), inductor's output (autotune tables, warnings) only with --verbose."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import bench.engines.compiled as compiled
from bench.engines import compile_report, make_engine

pytestmark = pytest.mark.usefixtures("one_thread")


def model() -> LlamaForCausalLM:
    """One layer whose products have two shapes (q/k/v and gate/up concatenated, and the head, are
    64 x 32; o and down 32 x 32): autotune benchmarks four products a compile, not five."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def compile_one(verbose: bool) -> list[str]:
    """Compile one step width of a fresh one-layer model, autotuning its products as a large
    model's are (C++ GEMM templates against aten) and with inductor's caches off, so that autotune
    benchmarks and prints its tables; returns the engine's own lines."""
    lines: list[str] = []
    engine = make_engine("compiled", verbose, lines.append)(model(), (1,))
    with torch._inductor.config.patch(force_disable_caches=True), torch.inference_mode():
        engine.start(1, 8)
    return lines


@pytest.mark.slow
def test_inductor_output_only_with_verbose(capfd, monkeypatch, tmp_path):
    monkeypatch.setattr(compiled, "_CPU_GEMMS_FROM_BYTES", 0)
    monkeypatch.setattr(compile_report, "cache_dir", lambda: tmp_path)
    capfd.readouterr()
    lines = compile_one(verbose=False)
    quiet = capfd.readouterr()
    assert quiet.out == "" and quiet.err == ""  # not one line of inductor's, at any file descriptor
    # With products generated (as for a large model), a one-token step compiles as width 2 (compiled.py)
    assert len(lines) == 2 and lines[0].startswith("compiling llama (1 layer) for step width 2, batch 1: roughly")
    assert "inductor's cache is off" in lines[0] and lines[1].startswith("  compiled in ")
    lines = compile_one(verbose=True)
    loud = capfd.readouterr()
    assert "AUTOTUNE" in loud.err  # inductor's tables pass through
    assert "its last compile here" in lines[0]  # the first compile's time, recorded beside the cache
    assert (tmp_path / compile_report.RECORD).is_file()


def test_the_estimate_reads_the_record(monkeypatch, tmp_path):
    monkeypatch.setattr(compile_report, "cache_dir", lambda: tmp_path)
    m = model()
    assert compile_report.estimate(m, 1, [1, 2], False).startswith("roughly 42 s (nothing recorded")
    compile_report.record(m, 1, 1, False, 30.0)
    assert "nothing recorded" in compile_report.estimate(m, 1, [1, 2], False)  # width 2 never compiled
    compile_report.record(m, 1, 2, False, 12.0)
    compile_report.record(m, 1, 2, False, 4.0)
    assert compile_report.estimate(m, 1, [1, 2], False) == "about 34 s (its last compile here; the first took 42 s)"
    assert "nothing recorded" in compile_report.estimate(m, 2, [1], False)  # another batch shape


def test_the_outcome_says_what_the_cache_gave():
    assert compile_report.outcome(12.4, 2, 2, 0) == "compiled in 12 s (2 of 2 graphs from the cache)"
    assert "1 not cacheable: weights packed for oneDNN" in compile_report.outcome(80, 1, 0, 1)
