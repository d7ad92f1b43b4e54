"""Training an EAGLE-3 head offline (bench.eagle.train, bench.eagle.ttt) on the tiny pair:
the features are the target's teacher-forced states, the reduced vocabulary maps both ways, the
unrolled training step is what the decoding head computes, the loss falls, a killed run resumes to
the same tensors as an uninterrupted one, and the exported head loads through the published-layout
loader (bench.eagle) with the trained logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.eagle.heads import Eagle3Head, HeadConfig, load_eagle_head
from bench.eagle.shards import materialise
from bench.eagle.train import (
    DraftJob,
    FitSettings,
    draft_vocab,
    export_head,
    fit,
    generate_features,
    head_config,
    new_head,
    target_rows,
    train_draft,
)
from bench.eagle.ttt import chain_acceptance, collate, first_draft_acceptance, unroll
from bench.errors import BenchError

PROMPTS = [f"question {i}: what is {i} plus {3 * i}?" for i in range(8)]


@pytest.fixture(scope="module")
def records(tiny_pair, one_thread, tmp_path_factory):
    folder = tmp_path_factory.mktemp("features")
    return generate_features(
        tiny_pair, [{"prompt": p} for p in PROMPTS], folder, 12, 4, False, lambda _: None
    )


def test_features_are_the_teacher_forced_pass(tiny_pair, records):
    """The states kept from generation equal one forward over the finished sequence, to fp16's
    rounding: they are stored in half precision and memory-mapped, not held in memory."""
    layers = tiny_pair.target.config.num_hidden_layers
    for r in records[:3]:
        assert r["feats"].dtype == np.float16 and isinstance(r["feats"], np.memmap)
        out = tiny_pair.target(r["ids"][None], output_hidden_states=True)
        n, p = len(r["ids"]) - 1, r["prompt_len"]
        fused = torch.cat([out.hidden_states[i][0, :n] for i in (2, layers // 2, layers - 3)], dim=-1)
        full = materialise(r)
        torch.testing.assert_close(full["feats"], fused, atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(full["final"][p - 1 :], out.hidden_states[-1][0, p - 1 : n], atol=2e-3, rtol=2e-3)
        assert not full["final"][: p - 1].any()  # no loss reads the prompt's final states: not stored
        assert torch.equal(r["argmax"][p - 1 :], out.logits[0, p - 1 : n].argmax(-1))


def test_reduced_vocab_round_trips(records):
    """d2t[i] = target id - i over the sorted ids; t2d marks exactly them; draft -> target ->
    draft is the identity, and the most frequent response tokens are in."""
    d2t, t2d = draft_vocab(records, 16, 512, lambda _: None)
    target = torch.arange(16) + d2t
    assert torch.all(target[1:] > target[:-1]) and int(t2d.sum()) == 16
    assert torch.equal(torch.nonzero(t2d).flatten(), target)
    back = torch.cumsum(t2d.long(), 0) - 1  # target id -> draft id, where t2d holds it
    assert torch.equal(back[target], torch.arange(16))
    counts = torch.bincount(torch.cat([r["ids"][r["prompt_len"] :] for r in records]), minlength=512)
    assert t2d[counts.argmax()]
    with pytest.raises(BenchError, match="distinct tokens"):
        draft_vocab(records, 511, 512, lambda _: None)
    said = {int(t) for r in records for t in r["ids"][r["prompt_len"] :]}
    prompted = {int(t) for r in records for t in r["ids"][: r["prompt_len"]]} - said
    _, wide = draft_vocab(records, len(said) + 3, 512, lambda _: None)  # 3 slots past the responses' tokens
    kept = set(torch.nonzero(wide).flatten().tolist())
    assert said <= kept and len(kept - said) == 3 and kept - said <= prompted


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_unrolled_steps_are_the_decoding_chain(layers):
    """Step 0 of the unroll is the decoding head over the sequence; step j at position t is the
    head fed its own output j times after position t (cache of step 0's keys), as it drafts; an
    unroll from a later position computes the same logits there. With layers after the midlayer
    too (each keeps its own keys: a layer that feeds another computes every position at step 0)."""
    torch.manual_seed(0)
    cfg = HeadConfig(
        num_hidden_layers=layers,
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        draft_vocab_size=16,
        rope_theta=1000.0,
    )
    head = Eagle3Head(cfg).eval()
    for p in head.parameters():
        p.data.normal_(0, 0.2)
    feats, tokens = torch.randn(1, 9, 96), torch.randint(0, 64, (1, 9))
    steps = unroll(head, feats, tokens, 3)
    out, _ = head(feats, tokens)
    torch.testing.assert_close(steps[0], head.logits(out), atol=1e-5, rtol=1e-5)
    t = 5
    _, cache = head(feats[:, : t + 1], tokens[:, : t + 1])
    hidden = out[:, t : t + 1]
    for j in (1, 2):
        hidden, cache = head(hidden, tokens[:, t + j : t + j + 1], cache=cache)
        torch.testing.assert_close(steps[j][0, t], head.logits(hidden)[0, 0], atol=1e-5, rtol=1e-5)
    for j, sliced in enumerate(unroll(head, feats, tokens, 3, start=4)):  # positions 4 on only
        torch.testing.assert_close(sliced, steps[j][:, 4:], atol=1e-5, rtol=1e-5)


def _fit(pair, records, folder: Path, steps: int, kill_at: int | None = None):
    """A fresh head trained into ``folder``; ``kill_at`` raises inside the log at that step, after
    the checkpoint before it was written, as a kill would stop it."""
    d2t, t2d = draft_vocab(records, 32, pair.target.config.vocab_size, lambda _: None)
    head = new_head(pair, d2t, t2d, 0, True)
    settings = FitSettings(steps=steps, batch=3, ttt_steps=3, lr=3e-3, warmup=2, log_every=1, save_every=2)
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if kill_at is not None and line.startswith(f"step {kill_at}/"):
            raise KeyboardInterrupt

    state = fit(head, records, target_rows(pair, t2d), settings, folder / "checkpoint.pt", log)
    return head, state, lines


def test_loss_falls_and_a_killed_run_resumes_exactly(tiny_pair, records, tmp_path):
    whole, state, _ = _fit(tiny_pair, records, tmp_path / "whole", 8)
    losses = [h["loss"] for h in state["history"]]
    assert sum(losses[-2:]) < sum(losses[:2])
    with pytest.raises(KeyboardInterrupt):
        _fit(tiny_pair, records, tmp_path / "killed", 8, kill_at=5)
    resumed, state2, lines = _fit(tiny_pair, records, tmp_path / "killed", 8)
    assert lines[0].startswith("resumed:") and "step 4/8" in lines[0]
    assert [h["loss"] for h in state2["history"]] == losses
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_what_training_writes_names_no_module_so_a_moved_trainer_resumes_it(tiny_pair, tmp_path):
    """Draft-head training moved (bench.eagle.train -> bench.eagle.train, issue 60): a run begun
    before the move resumes only if its files pickle no class of the package: the checkpoint and
    the feature shards load with ``weights_only``, which refuses any such class."""
    prompts = [{"prompt": p, "source": "s", "row": i} for i, p in enumerate(PROMPTS[:3])]
    records = generate_features(tiny_pair, prompts, tmp_path / "feat", 6, 2, False, lambda _: None)
    d2t, t2d = draft_vocab(records, 32, tiny_pair.target.config.vocab_size, lambda _: None)
    settings = FitSettings(steps=2, batch=2, ttt_steps=2, save_every=1)
    fit(new_head(tiny_pair, d2t, t2d, 0, True), records, target_rows(tiny_pair, t2d), settings, tmp_path / "c.pt", lambda _: None)
    written = [tmp_path / "c.pt", *sorted((tmp_path / "feat").glob("*.pt"))]
    assert len(written) == 3  # the checkpoint, two shards (work/vocab.pt is read weights_only already)
    for path in written:
        torch.load(path, weights_only=True)


def test_heads_trained_before_the_move_still_load():
    """The shipped EAGLE head, named as its pair file names it (``eagle: reference/smollm2-eagle``),
    loads through today's loader; the shipped verifier head loads as the demo grid names it; and a
    card that names a module of the package (``bench.x`` or ``bench/x.py``) names one that exists."""
    import re
    from types import SimpleNamespace

    from bench.drafters.eagle import draft_head_source
    from bench.grid import load_grid
    from bench.verifier_heads import WeightHead, load_head

    import bench

    root = Path(bench.__file__).resolve().parent.parent  # the folder that holds the package
    source = draft_head_source("reference/smollm2-eagle")
    assert Path(source) == root / "bench" / "reference" / "smollm2-eagle"
    head = load_eagle_head(source, SimpleNamespace(vocab_size=49152, hidden_size=576))
    assert isinstance(head, Eagle3Head) and head.config.draft_vocab_size == 8192
    weight, card = load_head(load_grid("demo")["head"], "ref", (64, 96))
    assert isinstance(weight, WeightHead) and card["trained"]
    cards = sorted((root / "bench").rglob("card.json"))
    assert len(cards) >= 3
    for path in cards:
        text = path.read_text()
        json.loads(text)
        for name in re.findall(r"\bbench(?:\.[a-z_]+)+", text):
            assert (root / (name.replace(".", "/") + ".py")).is_file() or (root / name.replace(".", "/")).is_dir(), (path, name)
        for name in re.findall(r"\bbench/[\w/]+\.py", text):
            assert (root / name).is_file(), (path, name)


def test_exported_head_loads_in_the_published_layout(tiny_pair, records, tmp_path):
    """config.json + model.safetensors read back through bench.eagle's loader give the trained
    head's draft logits (fp16 weights), and the counting of chain acceptance runs on it."""
    head, _, _ = _fit(tiny_pair, records, tmp_path, 2)
    config = head_config(tiny_pair, 32)
    export_head(head, config, tmp_path / "head")
    loaded = load_eagle_head(tmp_path / "head", tiny_pair.target).float()
    assert json.loads((tmp_path / "head" / "config.json").read_text())["draft_vocab_size"] == 32
    assert torch.equal(loaded.d2t, head.d2t) and torch.equal(loaded.t2d, head.t2d)
    batch = collate(records[:2])
    a, b = (
        unroll(head, batch["feats"], batch["tokens"], 2),
        unroll(loaded, batch["feats"], batch["tokens"], 2),
    )
    torch.testing.assert_close(a[1], b[1], atol=2e-2, rtol=2e-2)
    result = chain_acceptance(loaded, records, 3)
    assert result["rounds"] > 0 and 1.0 <= result["tokens_per_round"] <= 4.0


def test_a_two_layer_head_starts_as_the_one_layer_head_and_round_trips(tiny_pair, records, tmp_path):
    """``--layers 2``: the layer after the midlayer starts as the identity (its output projections
    at zero), so its first draft logits are the one-layer head's under the same seed; exported, it
    loads back through bench.eagle's loader as a two-layer EAGLE-3 head with the same logits."""
    d2t, t2d = draft_vocab(records, 32, tiny_pair.target.config.vocab_size, lambda _: None)
    one, two = new_head(tiny_pair, d2t, t2d, 0, True), new_head(tiny_pair, d2t, t2d, 0, True, layers=2)
    batch = collate(records[:2])
    a, b = (unroll(h, batch["feats"], batch["tokens"], 2) for h in (one, two))
    torch.testing.assert_close(a[1], b[1])
    for p in two.later_layers()[0].parameters():
        p.data.normal_(0, 0.2)
    export_head(two, head_config(tiny_pair, 32, layers=2), tmp_path / "head")
    loaded = load_eagle_head(tmp_path / "head", tiny_pair.target).float()
    assert loaded.config.num_hidden_layers == 2 and len(loaded.later_layers()) == 1
    want, got = (unroll(h, batch["feats"], batch["tokens"], 2) for h in (two, loaded))
    torch.testing.assert_close(want[1], got[1], atol=2e-2, rtol=2e-2)
    assert not torch.allclose(want[1], a[1], atol=1e-2)


def test_train_draft_writes_head_and_card(tiny_pair, tmp_path):
    """The whole recipe end to end from a prompts file: head, card with the data and acceptance."""
    lines = [{"prompt": p, "split": "train", "source": "s", "row": i} for i, p in enumerate(PROMPTS)]
    lines += [{"prompt": "held out: 5 plus 7", "split": "heldout", "source": "s", "row": 99}]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, lines)))
    job = DraftJob(
        prompts=tmp_path / "p.jsonl",
        out=tmp_path / "out",
        new_tokens=8,
        gen_batch=4,
        chat=False,
        draft_vocab=24,
        fit=FitSettings(steps=2, batch=2, ttt_steps=2, log_every=1),
        depths=(2,),
    )
    card = train_draft(tiny_pair, job, log=lambda _: None)
    assert card["prompts"]["train"] == {"s": "rows 0..7 (8)"} and card["steps_done"] == 2
    assert (tmp_path / "out" / "model.safetensors").is_file() and (tmp_path / "out" / "card.json").is_file()
    assert card["heldout_acceptance"][0]["depth"] == 2


def test_training_stops_when_the_held_out_loss_stops_falling(tiny_pair, records, tmp_path):
    """With a held-out set and eval_every, a rate far too high makes the held-out loss rise: the
    run stops before its last step, the checkpoint says so (a rerun does not train on), and the
    head it ends on is the best evaluation's, not the last step's."""
    d2t, t2d = draft_vocab(records, 32, tiny_pair.target.config.vocab_size, lambda _: None)
    settings = FitSettings(steps=40, batch=3, ttt_steps=2, lr=0.5, warmup=1, eval_every=1, patience=2, log_every=100)
    train, held = records[:6], records[6:]
    head = new_head(tiny_pair, d2t, t2d, 0, True)
    state = fit(head, train, target_rows(tiny_pair, t2d), settings, tmp_path / "c.pt", lambda _: None, held=held)
    losses = [e["loss"] for e in state["evals"]]
    assert state["stopped"] and state["step"] < 40 and len(losses) == state["step"]
    assert state["best_loss"] == min(losses) and losses[-1] > state["best_loss"]
    for k, v in state["best"].items():
        assert torch.equal(head.state_dict()[k], v), k
    again = fit(new_head(tiny_pair, d2t, t2d, 0, True), train, target_rows(tiny_pair, t2d), settings, tmp_path / "c.pt", lambda _: None, held=held)
    assert again["step"] == state["step"] and len(again["history"]) == state["step"]


def test_runs_over_subsets_share_one_features_folder(tiny_pair, tmp_path):
    """Shards are keyed by source:row: a larger run generates only the prompts a smaller one did
    not, and each record is the same whichever run made it; a half-written shard is ignored."""
    prompts = [{"prompt": p, "source": "s", "row": i} for i, p in enumerate(PROMPTS)]
    logs: list[str] = []
    small = generate_features(tiny_pair, prompts[:3], tmp_path, 6, 2, False, logs.append)
    (tmp_path / "shard_junk.feats.npy.tmp.npy").write_bytes(b"half")  # a kill mid-write leaves this
    big = generate_features(tiny_pair, prompts, tmp_path, 6, 2, False, logs.append)
    assert any("found 3 of 8" in line for line in logs)
    assert len(list(tmp_path.glob("*.pt"))) == 2 + 3  # 3 prompts in 2 shards, then 5 in 3
    for a, b in zip(small, big[:3], strict=True):
        assert torch.equal(a["ids"], b["ids"]) and np.array_equal(a["feats"], b["feats"])


def test_the_card_gives_acceptance_and_coverage_per_domain(tiny_pair, tmp_path):
    """Held-out prompts carry a domain: the card reports each domain's chain acceptance and the
    share of its response tokens the draft vocabulary holds; 'valid' prompts stop training and
    are never among the judged ones."""
    lines = [{"prompt": p, "split": "train", "source": "s", "domain": "math", "row": i} for i, p in enumerate(PROMPTS)]
    lines += [{"prompt": "held out: 5 plus 7", "split": "heldout", "source": "s", "domain": "math", "row": 98}]
    lines += [{"prompt": "say hello to me", "split": "heldout", "source": "t", "domain": "chat", "row": 0}]
    lines += [{"prompt": "valid: 1 plus 1", "split": "valid", "source": "s", "domain": "math", "row": 99}]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, lines)))
    fit_settings = FitSettings(steps=3, batch=2, ttt_steps=2, log_every=1, eval_every=1)
    job = DraftJob(prompts=tmp_path / "p.jsonl", out=tmp_path / "out", new_tokens=8, gen_batch=4, chat=False,
                   draft_vocab=24, fit=fit_settings, depths=(2,), features=tmp_path / "feats")  # fmt: skip
    card = train_draft(tiny_pair, job, log=lambda _: None)
    assert set(card["heldout_by_domain"]) == {"math", "chat"}
    assert all(0.0 <= d["coverage"] <= 1.0 and d["rounds"] > 0 for d in card["heldout_by_domain"].values())
    assert len(card["heldout_loss"]) == 3 and card["prompts"]["heldout"] == {"s": "rows 98..98 (1)", "t": "rows 0..0 (1)"}
    assert (tmp_path / "feats" / "features_valid").is_dir() and not (tmp_path / "out" / "work" / "features_train").exists()


def test_a_trimmed_prompt_keeps_every_loss_position(records):
    """--context C keeps the last C prompt positions: every position with a loss stays, with the
    same tokens, features and targets; C at least the prompt is the record itself."""
    from bench.eagle.shards import trim

    r = materialise(records[0])
    assert trim(r, r["prompt_len"]) is r and trim(r, 0) is r
    cut = trim(r, 2)
    full, short = collate([r]), collate([cut])
    assert cut["prompt_len"] == 2 and int(full["valid"].sum()) == int(short["valid"].sum()) > 0
    drop = r["prompt_len"] - 2
    assert torch.equal(full["tokens"][0, drop:], short["tokens"][0]) and torch.equal(full["final"][0, drop:], short["final"][0])
    assert torch.equal(full["valid"][0, drop:], short["valid"][0]) and torch.equal(full["feats"][0, drop:], short["feats"][0])


def test_a_redacted_prompts_file_is_refused_in_one_line(tmp_path):
    """The shipped file keeps CNN/DM and XSum prompts as hashes only: training from it says how to
    rebuild the text instead of failing on a missing field."""
    from bench.eagle.train import read_prompts

    lines = [{"source": "t0:xsum_x", "row": 0, "split": "train", "sha256": "ab", "shingles": []}]
    (tmp_path / "p.jsonl").write_text(json.dumps(lines[0]) + "\n")
    with pytest.raises(BenchError, match="scripts/eagle_prompts.py"):
        read_prompts(tmp_path / "p.jsonl", "train")


def test_a_stopped_run_exports_its_best_head_without_training_on(tiny_pair, tmp_path):
    """--export-now with the stopped run's flags: no further step, the head and a card from the
    checkpoint as it stood, saying so."""
    lines = [{"prompt": p, "split": "train", "source": "s", "row": i} for i, p in enumerate(PROMPTS)]
    lines += [{"prompt": "held out: 5 plus 7", "split": "heldout", "source": "s", "row": 98}]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, lines)))
    settings = FitSettings(steps=6, batch=2, ttt_steps=2, log_every=1, save_every=1)
    job = DraftJob(prompts=tmp_path / "p.jsonl", out=tmp_path / "out", new_tokens=8, gen_batch=4, chat=False,
                   draft_vocab=24, fit=settings, depths=(2,))  # fmt: skip

    def killed(line: str) -> None:
        if line.startswith("step 3/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_draft(tiny_pair, job, log=killed)
    from dataclasses import replace

    card = train_draft(tiny_pair, replace(job, export_now=True), log=lambda _: None)
    assert card["steps_done"] == 2 and card["ended"]  # step 3 died before its checkpoint.startswith("exported") and (tmp_path / "out" / "model.safetensors").is_file()


def test_cli_train_draft(tmp_path):
    """`diversed-bench train-draft` end to end on the tiny pair: the head, a card naming the
    command, and a re-run that resumes instead of training again."""
    from typer.testing import CliRunner

    from bench.cli import app

    lines = [{"prompt": p, "split": "train", "source": "s", "row": i} for i, p in enumerate(PROMPTS[:4])]
    lines += [{"prompt": "held out: 2 plus 2", "split": "heldout", "source": "s", "row": 9}]
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, lines)))
    args = [
        "train-draft",
        "--pair",
        "tiny",
        "--out",
        str(tmp_path / "h"),
        "--prompts",
        str(tmp_path / "p.jsonl"),
        "--no-chat-template",
        "--new-tokens",
        "6",
        "--draft-vocab",
        "8",
        "--steps",
        "2",
        "--batch",
        "2",
        "--ttt-steps",
        "2",
    ]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    card = json.loads((tmp_path / "h" / "card.json").read_text())
    assert card["command"].startswith("diversed-bench") and card["draft_vocab_size"] == 8
    again = CliRunner().invoke(app, args)
    assert "found 4 of 4 sequences" in again.output and "resumed:" in again.output


def test_shipped_smollm2_head_is_the_published_layout_and_its_card_matches():
    """bench/reference/smollm2-eagle: the EAGLE-3 keys exactly, fp16 weights, a vocabulary mapping
    of the configured size, under 15 MB, and a card naming the shipped prompts file by its hash
    with disjoint train and held-out rows."""
    from safetensors.torch import load_file

    from bench.eagle.train import PACKAGED_PROMPTS, rows_sha256

    folder = PACKAGED_PROMPTS.parent
    config = json.loads((folder / "config.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    layer = {
        f"midlayer.{k}.weight"
        for k in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
            "hidden_norm",
            "input_layernorm",
            "post_attention_layernorm",
        )
    }
    assert set(state) == layer | {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"}
    assert all(v.dtype == torch.float16 for k, v in state.items() if k not in ("d2t", "t2d"))
    size = config["draft_vocab_size"]
    assert state["lm_head.weight"].shape == (size, config["hidden_size"]) and int(state["t2d"].sum()) == size
    assert torch.equal(torch.arange(size) + state["d2t"], torch.nonzero(state["t2d"]).flatten())
    # one layer at SmolLM2's width (~10 MB fp16) and lm_head over the draft vocabulary (1.2 KB a token)
    assert (folder / "model.safetensors").stat().st_size < 11e6 + 1200 * size
    card = json.loads((folder / "card.json").read_text())
    # the shipped file's CNN/DM and XSum prompts are hashes: its rows, not its bytes, are the trained-on file's
    assert card["prompts"]["rows_sha256"] == rows_sha256(PACKAGED_PROMPTS)
    rows = [json.loads(line) for line in PACKAGED_PROMPTS.read_text().splitlines()]
    train = {(r["source"], r["row"]) for r in rows if r["split"] == "train"}
    held = {(r["source"], r["row"]) for r in rows if r["split"] == "heldout"}
    assert train and held and not train & held and card["draft_vocab_size"] == size


def test_first_draft_acceptance_at_t1_is_the_rules_expectation(tiny_pair, records):
    """The exact first-draft acceptance at T = 1: the sampled chain's sum min(p, q) matches drawing
    x ~ q and accepting with min(1, p/q) (within 4 standard errors of 20,000 draws a position); the
    tree's first level with every draft id as a child accepts the mass p puts on the draft
    vocabulary, and with one child the mass of the head's argmax."""
    d2t, t2d = draft_vocab(records, 32, tiny_pair.target.config.vocab_size, lambda _: None)
    head = new_head(tiny_pair, d2t, t2d, 0, True)
    w = tiny_pair.target.get_output_embeddings().weight.detach().float()
    got = first_draft_acceptance(head, records, w, 1.0, topk=32)
    r = materialise(records[0])
    ids, p = r["ids"], r["prompt_len"]
    logits = unroll(head, r["feats"][None], ids[None, 1:], 1, p - 1)[0][0, : len(ids) - p - 1]
    target = torch.softmax(r["final"][p : len(ids) - 1] @ w.T, dim=-1)
    q = head.target_probs(torch.softmax(logits, dim=-1))
    one = first_draft_acceptance(head, records[:1], w, 1.0, topk=1)
    torch.testing.assert_close(torch.tensor(one["tree_first_level"]), target.gather(-1, head.to_target(logits.argmax(-1))[:, None]).mean())
    g = torch.Generator().manual_seed(0)
    draws = torch.multinomial(q, 20_000, replacement=True, generator=g)
    ratio = (target.gather(-1, draws) / q.gather(-1, draws)).clamp(max=1.0)
    accepted = (torch.rand(ratio.shape, generator=g) < ratio).float().mean(-1)
    want = torch.minimum(target, q).sum(-1)
    assert ((accepted - want).abs() <= 4 * (want * (1 - want) / 20_000).sqrt() + 1e-4).all()
    whole = sum(float((torch.softmax(materialise(x)["final"][x["prompt_len"] : len(x["ids"]) - 1] @ w.T, -1)[:, t2d]).sum()) for x in records)
    assert got["positions"] > 0 and abs(got["tree_first_level"] - whole / got["positions"]) < 1e-5
    assert 0.0 < got["sampled_chain"] < 1.0
