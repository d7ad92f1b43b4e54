"""The timing pass: each configuration warms up once, untimed and unstored, before its first timed
example; each timed example is decoded --timing-repeats times, the configurations interleaved."""

from bench.config import RunSettings
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
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd"], device="cpu", settings=RunSettings(max_new_tokens=3)
    )
    Runner(tmp_path, limit=2, timing_examples=2, timing_repeats=1, progress=False, log=lambda m: None).run(run)
    # two warm-up decodes (one per configuration) that store nothing, then two examples of each,
    # the configurations interleaved, each example's rows stored once every configuration decoded it
    assert events == ["decode", "decode"] + ["decode", "decode", "store", "store"] * 2
    assert load_results(tmp_path)["wall_time_s"].notna().sum() == 4


def test_repeats_interleave_the_configurations_and_store_one_row_with_every_time(tmp_path, monkeypatch):
    """Each example is decoded R times, every configuration once per repeat (ar, sd, ar, sd, ...);
    its row keeps the R times and their median, and the repeats give the same tokens (same seed)."""
    from bench.decoding import SpeculativeDecoder
    from bench.store import ResultStore

    events: list[str] = []
    generate, append = SpeculativeDecoder.generate_batch, ResultStore.append

    def decode(self, prompts, budget, seeds, *a, **k):
        gens = generate(self, prompts, budget, seeds, *a, **k)
        events.append(f"{self.verifier.name} {gens[0].token_ids}")
        return gens

    monkeypatch.setattr(SpeculativeDecoder, "generate_batch", decode)
    monkeypatch.setattr(
        ResultStore, "append", lambda self, *a, **k: events.append("store") or append(self, *a, **k)
    )
    run = configs_from_flags(
        tasks=["arith"], pairs=["ref"], methods=["ar", "sd"], device="cpu", settings=RunSettings(max_new_tokens=3)
    )
    Runner(tmp_path, limit=2, timing_examples=2, timing_repeats=3, progress=False, log=lambda m: None).run(run)
    timed = events[2:]  # after the two warm-ups
    for example in (timed[:8], timed[8:]):
        ar, sd = example[0:6:2], example[1:6:2]
        assert [e.split()[0] for e in example[:6]] == ["ar", "sd"] * 3 and example[6:] == ["store", "store"]
        assert len(set(ar)) == 1 and len(set(sd)) == 1  # the same tokens every repeat
    rows = load_results(tmp_path)
    assert all(len(t) == 3 for t in rows["wall_times_s"])
    assert list(rows["wall_time_s"]) == [sorted(t)[1] for t in rows["wall_times_s"]]
