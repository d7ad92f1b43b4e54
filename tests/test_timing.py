"""The timing pass: each configuration warms up once, untimed and unstored, before its first timed
example."""

from bench.grid import configs_from_flags
from bench.runner import Runner
from bench.store import load_results


def test_each_configuration_warms_up_before_its_first_timed_example(tmp_path, monkeypatch):
    from bench.decoding import SpeculativeDecoder
    from bench.store import ResultStore

    events: list[str] = []
    generate, append = SpeculativeDecoder.generate_batch, ResultStore.append
    monkeypatch.setattr(
        SpeculativeDecoder,
        "generate_batch",
        lambda self, *a, **k: events.append("decode") or generate(self, *a, **k),
    )
    monkeypatch.setattr(
        ResultStore, "append", lambda self, *a, **k: events.append("store") or append(self, *a, **k)
    )
    run = configs_from_flags(
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd"], device="cpu", max_new_tokens=3
    )
    Runner(tmp_path, limit=2, timing_examples=2, progress=False, log=lambda m: None).run(run)
    # two warm-up decodes (one per configuration) that store nothing, then four timed examples
    assert events == ["decode", "decode"] + ["decode", "store"] * 4
    assert load_results(tmp_path)["wall_time_s"].notna().sum() == 4
