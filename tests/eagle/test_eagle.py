"""EAGLE draft heads: the published layouts loaded through the real code equal the authors' and
vLLM's implementations, the target's states reach the head exactly, q is a law over the target's
vocabulary, lossless sd keeps the target's law, greedy sd equals ar, and EAGLE-2's dynamic tree.

References nobody here wrote, imported from their wheels (neither installs cleanly with its
dependencies beside transformers 5: ``speculators`` pins transformers<=5.19, ``eagle-llm`` pins
accelerate 0.21 and protobuf 3.19), so install them without: ``pip install --no-deps
speculators==0.9.0 eagle-llm==1.2.1``. EAGLE-3: speculators' ``LlamaDecoderEagle3FirstLayer``
(``speculators/models/eagle3/model_definitions.py``, transformers' Llama layer, rotary and norms);
EAGLE-1: eagle-llm's ``eagle/model/cnets.py`` ``Model`` (the authors' EAGLE-1/2 head).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys
import types
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants as hub_constants
from safetensors.torch import load_file
from scipy import stats
from transformers import LlamaConfig, LlamaForCausalLM

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.drafters import DraftContext, make_drafter, parse_drafter
from bench.drafters import canonical_drafter
from bench.drafters.eagle import EagleDrafter, with_pair_head
from bench.eagle import Eagle1Head, Eagle3Head, load_eagle_head
from bench.engines import EagerEngine
from bench.errors import BenchError
from bench.pairs import resolve_pair
from bench.verifiers import make_verifier
from tests.eagle_checkpoints import eagle_config, write_eagle_head
from tests.hub_checkpoints import save_snapshot

pytestmark = pytest.mark.usefixtures("one_thread")
E3_REPO, E1_REPO = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "yuhuili/EAGLE-LLaMA3-Instruct-8B"


def small_target(vocab: int = 300, seed: int = 0, scale: float = 40.0) -> LlamaForCausalLM:
    """A random 6-layer Llama (EAGLE-3 reads layers 2, 3 and 3), its lm_head scaled so its laws
    are neither flat nor one-hot."""
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=vocab, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    model.lm_head.weight.data *= scale
    return model


def reference(name: str, module: str) -> types.ModuleType:
    """A module of an installed reference wheel, by path (its package ``__init__`` imports
    training dependencies we do not need: the packages are stubbed with their real folders)."""
    try:
        root = Path(importlib.metadata.distribution(name).locate_file(module.split(".")[0]))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"reference {name} not installed: pip install --no-deps speculators==0.9.0 eagle-llm==1.2.1")
    parts = module.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in sys.modules:
            stub = types.ModuleType(package)
            stub.__path__ = [str(root.joinpath(*parts[1:i]))]
            sys.modules[package] = stub
    return importlib.import_module(module)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A temporary Hugging Face cache holding both heads as the hub serves them, offline."""
    target = small_target()
    cache = tmp_path / "hub"
    for repo, kind in ((E3_REPO, "eagle3"), (E1_REPO, "eagle1")):
        vocab = 120 if kind == "eagle3" else None
        save_snapshot(cache, repo, {kind: lambda s, k=kind, v=vocab: write_eagle_head(s, target.config, k, draft_vocab=v, seed=3)})
    # The authors' eagle-llm 1.2.1 wheel builds EAGLE-1's rotary at base 10000 whatever the config
    # says (their GitHub cnets1.py reads rope_theta): at 10000 both readings agree.
    config_path = next(cache.glob("models--yuhuili--EAGLE-LLaMA3-Instruct-8B/snapshots/*/config.json"))
    config_path.write_text(json.dumps(json.loads(config_path.read_text()) | {"rope_theta": 10000.0}))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    return target, cache


def features(target, ids, layers):
    with torch.no_grad():
        states = target(ids, output_hidden_states=True).hidden_states
    return torch.cat([states[i] for i in layers], dim=-1)


def test_eagle3_draft_logits_equal_speculators(hub):
    """EAGLE-3 from the hub cache through load_eagle_head: fc, midlayer (q/k/v over 2H, rope at
    the head config's theta 5e5), norm, lm_head equal speculators' layer on the same weights."""
    target, cache = hub
    defs = reference("speculators", "speculators.models.eagle3.model_definitions")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

    head = load_eagle_head(E3_REPO, target).eval()
    assert isinstance(head, Eagle3Head) and head.config.rope_theta == 500000.0
    folder = next(cache.glob("models--yuhuili--EAGLE3-LLaMA3.1-Instruct-8B/snapshots/*"))
    c, state = json.loads((folder / "config.json").read_text()), load_file(str(folder / "model.safetensors"))
    assert "embed_tokens.weight" not in state  # EAGLE-3 embeds with the target's table
    lc = LlamaConfig(**{k: c[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                          "rms_norm_eps", "rope_theta", "vocab_size")}, attn_implementation="eager")
    layer = defs.LlamaDecoderEagle3FirstLayer(lc, layer_idx=0).eval()
    layer.load_state_dict({k.removeprefix("midlayer."): v for k, v in state.items() if k.startswith("midlayer.")})
    norm = LlamaRMSNorm(lc.hidden_size, eps=lc.rms_norm_eps)
    norm.weight.data = state["norm.weight"]
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(1))
    feats = features(target, ids, head.target_layers(6))
    positions = torch.arange(8).expand(2, -1)
    with torch.no_grad():
        x = torch.cat([target.get_input_embeddings()(ids[:, 1:]), feats[:, :-1] @ state["fc.weight"].T], dim=-1)
        mask = torch.full((8, 8), torch.finfo(torch.float32).min).triu(1).expand(2, 1, 8, 8)
        out = layer(x, attention_mask=mask, position_ids=positions, position_embeddings=LlamaRotaryEmbedding(lc)(x, positions))
        want = norm(out) @ state["lm_head.weight"].T
        got = head.logits(head(feats[:, :-1], ids[:, 1:])[0])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert want.std() > 1.0  # the weights make the logits informative, not flat


def test_eagle1_draft_logits_equal_the_authors(hub):
    """EAGLE-1 from the hub cache: embed_tokens inside, fc with bias, a layer without
    input_layernorm, then the target's frozen lm_head, equal eagle-llm's ``Model``."""
    target, cache = hub
    cnets = reference("eagle-llm", "eagle.model.cnets")
    configs = reference("eagle-llm", "eagle.model.configs")
    head = load_eagle_head(E1_REPO, target).eval()
    assert isinstance(head, Eagle1Head) and not hasattr(head, "lm_head")
    folder = next(cache.glob("models--yuhuili--EAGLE-LLaMA3-Instruct-8B/snapshots/*"))
    config = configs.EConfig.from_pretrained(str(folder))
    config.rope_scaling = None  # transformers 5 fills it from rope_theta; the authors' code predates that
    authors = cnets.Model(config, load_emb=False, bias=True).eval()
    authors.load_state_dict(load_file(str(folder / "model.safetensors")))
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(2))
    feats = features(target, ids, head.target_layers(6))
    with torch.no_grad():
        want = target.lm_head(authors(feats[:, :-1], input_ids=ids[:, 1:]))
        got = head.logits(head(feats[:, :-1], ids[:, 1:])[0])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert want.std() > 1.0


def test_loading_refuses_what_the_layout_does_not_hold(tmp_path):
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=100, binary=True)
    assert isinstance(load_eagle_head(folder, target), Eagle3Head)  # pytorch_model.bin loads too
    with pytest.raises(BenchError, match="vocabulary"):
        load_eagle_head(folder, small_target(vocab=301))
    (folder / "config.json").write_text(json.dumps(eagle_config(target.config, "eagle3") | {"rope_scaling": {"type": "linear", "factor": 2.0}}))
    with pytest.raises(BenchError, match="rope_scaling"):
        load_eagle_head(folder, target)
    (folder / "config.json").write_text(json.dumps({"speculators_model_type": "eagle3", "transformer_layer_config": {}}))
    with pytest.raises(BenchError, match="lacks hidden_size"):
        load_eagle_head(folder, target)
    with pytest.raises(BenchError, match="not a folder"):
        load_eagle_head(tmp_path / "nowhere", target)


def test_an_fp16_head_keeps_the_targets_embedding_unrounded(tmp_path):
    """The authors cast the layer to the target's dtype (ea_model.py) and load the embedding
    ``.float()``: the target's table reaches the head exactly, never through the checkpoint's fp16."""
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=100)
    state = load_file(str(folder / "model.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, str(folder / "model.safetensors"))
    table = target.get_input_embeddings().weight
    assert not torch.equal(table.half().float(), table)  # fp16 would round it
    head = load_eagle_head(folder, target).to(torch.float32)
    assert head.fc.weight.dtype == torch.float32 and torch.equal(head.embed_tokens.weight, table)


def test_an_eagle3_layer_has_no_qkv_bias_whatever_its_config(tmp_path):
    """The authors' EAGLE-3 LlamaAttention is built with bias=False: a config's ``qkv_bias`` does not
    add parameters, and a checkpoint carrying q/k/v biases is refused as not the layout."""
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=100)
    (folder / "config.json").write_text(json.dumps(json.loads((folder / "config.json").read_text()) | {"qkv_bias": True}))
    head = load_eagle_head(folder, target)
    assert head.midlayer.self_attn.q_proj.bias is None
    from safetensors.torch import save_file

    state = load_file(str(folder / "model.safetensors"))
    width = state["midlayer.self_attn.q_proj.weight"].shape[0]
    save_file(state | {"midlayer.self_attn.q_proj.bias": torch.zeros(width)}, str(folder / "model.safetensors"))
    with pytest.raises(BenchError, match="unexpected"):
        load_eagle_head(folder, target)


def test_an_eagle1_head_without_embed_tokens_reads_the_targets(tmp_path):
    """cnets.py ``load_emb``: an EAGLE-1 checkpoint without ``embed_tokens`` embeds with the
    target's table, as the authors' loader does, instead of being refused."""
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle1")
    state = load_file(str(folder / "model.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v for k, v in state.items() if k != "embed_tokens.weight"}, str(folder / "model.safetensors"))
    head = load_eagle_head(folder, target)
    assert isinstance(head, Eagle1Head)
    assert torch.equal(head.embed_tokens.weight, target.get_input_embeddings().weight)


def decoder(target, method, spec, sampling, draft_len=3, engine=EagerEngine):
    verifier = make_verifier(method)
    return SpeculativeDecoder(target, None, verifier, draft_len=draft_len, sampling=sampling, engine=engine, drafter=spec or "model")


@pytest.mark.parametrize("tree", [0, 1])
def test_the_head_reads_the_target_states_of_every_kept_token(tmp_path, tree):
    """Batched rows of different lengths, sampled (so rounds accept some drafts and roll back the
    rest): the states handed to the drafter are the target's own over the final sequence, and the
    head's confirmed cache equals one head forward over them."""
    target = small_target(vocab=12)
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=8)
    spec = f"eagle:path={folder},tree={tree},topk=2,depth=3,total=5"
    sd = decoder(target, "sd", spec, Sampling(1.0), draft_len=5)
    got: dict[int, list[torch.Tensor]] = {}
    take = sd.drafter.take_states
    sd.drafter.take_states = lambda rows, states: ([got.setdefault(r.index, []).append(s) for r, s in zip(rows, states)], take(rows, states))
    prompts = [[1, 5, 7, 9, 11, 3], [4, 2], [7, 7, 1]]
    out = sd.generate_batch(prompts, 16, [0, 1, 2])
    assert sum(g.stats.accepted_tokens for g in out) > 0  # rollbacks and acceptances both happened
    head = sd.drafter.head
    for b, (prompt, gen) in enumerate(zip(prompts, out)):
        seq = torch.tensor([prompt + gen.token_ids])
        want = features(target, seq, head.target_layers(6))[0, :-1]
        torch.testing.assert_close(torch.cat(got[b])[: want.shape[0]], want, rtol=1e-5, atol=1e-5)
        state = sd.drafter.rows[b]
        with torch.no_grad():
            _, cache = head(want[None, : state.fed], seq[:, 1 : state.fed + 1])
        torch.testing.assert_close(state.cache[0][0], cache[0][0], rtol=1e-4, atol=1e-5)



def counting(head):
    """Count ``head``'s forwards in ``calls[0]``."""
    calls, forward = [0], head.forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    head.forward = counted
    return calls


def test_a_round_counts_the_catch_up_and_a_head_forward_per_chain_token_after_the_first(tmp_path):
    """docs/results-schema.md's draft_forwards for EAGLE, round by round on a tiny head: the
    catch-up over the states confirmed since the last round (none, none counted), then cap - 1
    chain steps (the first token is read off the catch-up's output); a tree: a forward per level
    after the root's children."""
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=120)
    drafter = EagleDrafter(path=str(folder)).bind(DraftContext(target=target, sampling=Sampling(0.0), greedy=True))
    calls = counting(drafter.head)
    seq = [1, 5, 7, 9, 11, 3, 8, 2, 6, 4]
    states = features(target, torch.tensor([seq]), drafter.target_layers(6))[0]
    row = types.SimpleNamespace(index=0, seq=seq[:6], generator=torch.Generator())
    drafter.start(1, 64)
    drafter.take_states([row], [states[:5]])  # the prompt's (as the loop's prefill hands them)
    rounds = []
    for kept, cap in ((0, 5), (3, 5), (0, 3), (1, 1)):
        if kept:  # the last round kept `kept` tokens: their states, and the row moves on
            drafter.take_states([row], [states[len(row.seq) - 1 : len(row.seq) - 1 + kept]])
            row.seq = seq[: len(row.seq) + kept]
        before = calls[0]
        draft = drafter.draft([row], [cap])
        rounds.append((draft.forwards, calls[0] - before, draft.counts))
    assert rounds == [([5], 5, [5]), ([5], 5, [5]), ([2], 2, [3]), ([1], 1, [1])]
    tree = EagleDrafter(path=str(folder), tree=1, topk=2, depth=3, total=5).bind(DraftContext(target=target, sampling=Sampling(0.0), greedy=True))
    tree.start(1, 64)
    tree.take_states([row], [states[: len(row.seq) - 1]])
    assert tree.draft([row], [5]).forwards == [3]  # catch-up, then levels 2 and 3


@pytest.mark.parametrize("tree", [0, 1])
def test_draft_forwards_count_every_head_forward(tmp_path, tree):
    """Batched rows (one with no state before its first round), sampled: each row's draft_forwards
    adds up to the head forwards the decode ran; a draft model's prefill has no EAGLE
    counterpart (the prompt's catch-up is the first round's)."""
    target = small_target(vocab=12)
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=8)
    sd = decoder(target, "sd", f"eagle:path={folder},tree={tree},topk=2,depth=3,total=5", Sampling(1.0), draft_len=5)
    calls = counting(sd.drafter.head)
    out = sd.generate_batch([[1, 5, 7, 9, 11, 3], [4, 2], [7]], 16, [0, 1, 2])
    assert sum(g.stats.draft_forwards for g in out) == calls[0] > 0

def test_q_is_the_draft_softmax_put_into_the_target_vocabulary(tmp_path):
    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=120)
    drafter = make_drafter(f"eagle:path={folder}", DraftContext(target=target, sampling=Sampling(1.0), reads=frozenset({"hidden"}), method="sd"))
    out = torch.randn(3, 64)
    logits, q, q_logits = drafter.law(out)
    targets = drafter.head.to_target(torch.arange(120))
    torch.testing.assert_close(q.sum(-1), torch.ones(3))
    torch.testing.assert_close(q[:, targets], logits.softmax(-1))
    off = torch.ones(300, dtype=torch.bool)
    off[targets] = False
    assert (q[:, off] == 0).all() and torch.equal(drafter.head.t2d, ~off)
    torch.testing.assert_close(q_logits.softmax(-1), q)


@pytest.mark.parametrize("tree", ["", ",tree=1,topk=2,depth=2,total=4"])
def test_lossless_sd_on_eagle_drafts_keeps_the_targets_law(tmp_path, tree):
    """T = 1, two EAGLE-3 draft levels over a draft vocabulary missing some target tokens, as the
    sampled chain (q's draws, the rejection rule) and as the authors' top-k tree (no law, the
    q-free rule of EAGLE-2/3 at every temperature): the first three emitted tokens follow the
    target's joint law (chi-square, pooled tail)."""
    target = small_target(vocab=6, seed=3, scale=3.0)
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=4)
    sd = decoder(target, "sd", f"eagle:path={folder}{tree}", Sampling(1.0), draft_len=2 if not tree else 4)
    prompt, draws = [1, 4, 2], []
    for s in range(0, 3000, 50):
        draws += [tuple(g.token_ids[:3]) for g in sd.generate_batch([prompt] * 50, 3, list(range(s, s + 50)))]
    grid = torch.cartesian_prod(torch.arange(6), torch.arange(6))
    with torch.no_grad():
        seqs = torch.cat([torch.tensor([prompt]).expand(36, -1), grid], dim=1)
        p = target(seqs).logits.double().softmax(-1)
    rows = torch.arange(36)
    joint = (p[rows, 2, grid[:, 0]] * p[rows, 3, grid[:, 1]]).unsqueeze(1) * p[:, 4, :]  # [(x1, x2), x3]
    counts = torch.zeros(36, 6, dtype=torch.double)
    for x1, x2, x3 in draws:
        counts[x1 * 6 + x2, x3] += 1
    expected = (joint * len(draws)).flatten()
    big = expected > 5
    observed = torch.cat([counts.flatten()[big], counts.flatten()[~big].sum(0, keepdim=True)])
    expected = torch.cat([expected[big], expected[~big].sum(0, keepdim=True)])
    assert stats.chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3
    assert sum(g.stats.accepted_tokens for g in sd.generate_batch([prompt] * 20, 3, list(range(20)))) > 0


def test_an_engine_that_does_not_keep_the_states_is_refused_in_one_line(tmp_path):
    """The target's engine is made keeping the layers the head reads (``open_engine``); a factory
    whose engine keeps none is refused before anything decodes, not met by a missing state."""
    target = small_target(vocab=12)
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=8)
    forgetful = lambda model, widths, states=(): EagerEngine(model, widths)  # noqa: E731
    with pytest.raises(BenchError, match="does not return the target's layer states.*--engine eager") as err:
        decoder(target, "sd", f"eagle:path={folder}", Sampling(0.0), engine=forgetful)
    assert "\n" not in str(err.value)
    kept = decoder(target, "sd", f"eagle:path={folder}", Sampling(0.0)).engines[0]
    assert kept.states_at == (2, 3, 3)  # EAGLE-3 on 6 layers: the states entering layers 2, 3 and 3


def test_pair_registry_names_the_heads():
    assert resolve_pair("llama3").eagle == E3_REPO
    assert resolve_pair("smollm2").eagle == "reference/smollm2-eagle"
    assert resolve_pair("qwen3").eagle == "Tengyunw/qwen3_8b_eagle3" and resolve_pair("gemma3").eagle is None
    assert with_pair_head("eagle:tree=1", "reference/x") == "eagle:path=reference/x,tree=1"
    assert with_pair_head("eagle:path=/h", "reference/x") == "eagle:path=/h"
    assert with_pair_head("lookup", "reference/x") == "lookup"
    # A run's configuration records its canonical spec, every parameter written out, the path empty:
    # that is no path, so `run --drafter eagle` decodes with the pair's head too.
    canonical = canonical_drafter("eagle:tree=1")
    assert "path=," in canonical
    assert with_pair_head(canonical, "reference/x").startswith("eagle:path=reference/x,")
    assert parse_drafter("eagle")[1] == {"path": "", "tree": 0, "topk": 4, "depth": 5, "total": 16}
    with pytest.raises(BenchError, match="tree takes"):
        parse_drafter("eagle:tree=2")
    with pytest.raises(BenchError, match="train it"):
        EagleDrafter(path="reference/no-such-head").bind(DraftContext(target=small_target(), sampling=Sampling(0.0), greedy=True))


def test_the_dynamic_tree_is_the_best_paths_by_confidence(tmp_path):
    """EAGLE-2's tree from ``grow`` equals the rule computed path by path with plain chain steps
    of the head: the root's top-k, each frontier node's top-k, the frontier the best k by
    cumulative log-prob, the ``total`` best candidates kept (so the tree's masks and positions
    give each node the states its own path gives it)."""
    from bench.drafters.eagle_tree import grow

    target = small_target()
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=120)
    drafter = EagleDrafter(path=str(folder), tree=1, topk=3, depth=3, total=10).bind(DraftContext(target=target, sampling=Sampling(0.0), greedy=True))
    row = types.SimpleNamespace(index=0, seq=[1, 5, 7, 9, 11, 3])
    drafter.start(1, 64)
    drafter.take_states([row], [features(target, torch.tensor([row.seq]), drafter.target_layers(6))[0, :-1]])
    tokens, parents = grow(drafter, row, 10)
    got = {path_of(tokens, parents, j) for j in range(len(tokens))}
    state, head, k = drafter.rows[0], drafter.head, 3

    def children(path):  # (log p, token) of the top-k after a path, by chain steps from the confirmed cache
        h, cache = state.last, state.cache
        for token in path:
            out, cache = head(h.unsqueeze(1), torch.tensor([[token]]), cache=cache)
            h = out[:, -1]
        top = head.logits(h)[0].float().log_softmax(-1).topk(k)
        return [(v, int(head.to_target(i))) for v, i in zip(top.values.tolist(), top.indices)]

    candidates = {(t,): v for v, t in children(())}
    frontier = list(candidates)
    for _ in range(2):
        level = {path + (t,): candidates[path] + v for path in frontier for v, t in children(path)}
        candidates |= level
        frontier = sorted(level, key=level.get, reverse=True)[:k]
    want = set(sorted(candidates, key=candidates.get, reverse=True)[:10])
    assert got == want and len(tokens) == 10


def path_of(tokens, parents, j):
    path = []
    while j >= 0:
        path.append(int(tokens[j]))
        j = parents[j]
    return tuple(reversed(path))


@pytest.mark.parametrize(
    "method", ["sd", "lossy", "cascade", "ensemble", "fuzzy", "mentored", "typical", "threshold", "relaxed", "diversed", "judge"]
)
def test_every_method_runs_on_eagle_drafts(tmp_path, method):
    """q is a law over the target's vocabulary, hidden the head's: every verifier decodes on them."""
    from bench.verifier_heads import WeightHead
    from bench.verifier_heads import JudgeHead

    target = small_target(vocab=40, scale=5.0)
    folder = write_eagle_head(tmp_path / "h", target.config, "eagle3", draft_vocab=30)
    heads = {"diversed": WeightHead(64, 64), "judge": JudgeHead("target", 64, 64)}
    verifier = make_verifier(method)
    sd = SpeculativeDecoder(target, None, verifier, draft_len=3, sampling=Sampling(1.0), head=heads.get(method),
                            drafter=f"eagle:path={folder}")
    out = sd.generate_batch([[1, 5, 7], [3, 2]], 12, [0, 1])
    assert [len(g.token_ids) for g in out] == [12, 12] and sum(g.stats.drafted_tokens for g in out) > 0


@pytest.mark.parametrize("tree", [0, 1])
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_greedy_sd_on_eagle_drafts_is_ar(tmp_path, tree, kind):
    """Greedy sd with either head, chain or dynamic tree, batched: ar's tokens (any head)."""
    target = small_target(vocab=12, scale=5.0)
    folder = write_eagle_head(tmp_path / "h", target.config, kind, draft_vocab=9 if kind == "eagle3" else None)
    prompts, greedy = [[1, 5, 7, 9, 11, 3], [4, 2], [7]], Sampling(0.0)
    ar = decoder(target, "ar", None, greedy, draft_len=0).generate_batch(prompts, 20, [0, 1, 2])
    sd = decoder(target, "sd", f"eagle:path={folder},tree={tree},topk=2,depth=3,total=6", greedy, draft_len=6)
    out = sd.generate_batch(prompts, 20, [0, 1, 2])
    assert [g.token_ids for g in out] == [g.token_ids for g in ar]
    assert sum(g.stats.accepted_tokens for g in out) > 0


@pytest.mark.parametrize("tree", [0, 1])
@pytest.mark.parametrize("which", ["synthetic", "shipped"])
def test_greedy_sd_on_eagle_drafts_is_ar_on_smollm2(smollm2, tmp_path, tree, which):
    """Real weights, fp32: greedy sd with an EAGLE-3 head (a random one in the published layout,
    and the shipped head where it exists) emits ar's tokens, chain and dynamic tree."""
    from bench.build import build_decoder

    if which == "shipped":
        folder = Path(__file__).resolve().parents[2] / "bench" / "reference" / "smollm2-eagle"
        if not (folder / "config.json").exists():
            pytest.skip("the smollm2 EAGLE head is not trained yet (docs/eagle.md)")
    else:
        folder = write_eagle_head(tmp_path / "h", smollm2.target.config, "eagle3", draft_vocab=2048)
    prompts = [list(smollm2.tokenizer("The capital of France is").input_ids), list(smollm2.tokenizer("def add(a, b):").input_ids)]
    greedy = Sampling(0.0)
    ar = build_decoder(smollm2, "ar", {}, draft_len=0, sampling=greedy).generate_batch(prompts, 16, [0, 1])
    spec = f"eagle:path={folder},tree={tree},topk=3,depth=4,total=8"
    sd = build_decoder(smollm2, "sd", {}, draft_len=8, sampling=greedy, drafter=spec).generate_batch(prompts, 16, [0, 1])
    assert [g.token_ids for g in sd] == [g.token_ids for g in ar]
