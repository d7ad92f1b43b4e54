"""Every real pair's architecture decodes exactly what transformers computes (the reference).

Tiny random checkpoints of the llama3, qwen3 and gemma3 pairs (tests/hub_checkpoints.py: Llama 3.1
with llama3 RoPE scaling, Qwen3, Gemma 3 -it as ``Gemma3ForConditionalGeneration`` with a sliding
window of 8 and different local/global RoPE bases) are loaded through the pair files and the real
loading code, and prompted with the GSM8K task's prompts under each tokenizer's chat template
(~120-140 tokens, far longer than the window). Against transformers' own code, in fp32:

- the logits of every harness step (prefill, one- and multi-token steps, steps after a rollback)
  equal a full forward of the same ids, within ``TOLERANCE``;
- greedy ``ar`` and ``sd`` (with the draft model, and with prompt lookup) equal
  ``generate(do_sample=False)`` token for token, on both engines, at batch 1 and in a batch of
  ragged prompt lengths;
- the prompt ids are the tokenizer's (and chat template's) ids of the task's prompt text;
- the checkpoints continue different prompts differently, so mixed-up rows could not pass.

One compiled-engine factory serves the module, and every batch has three rows, so each model
compiles its step widths once (target 1 and N + 1, draft 1 and 2). On those graphs, every method
(ar, sd, lossy, cascade, ensemble, DIVERSED) decodes on the compiled engine exactly as on eager,
tokens and counters, the check of tests/engines/test_compiled.py on these architectures.
"""

import huggingface_hub.constants as hub_constants
import pytest
import torch

from bench.decoding import SpeculativeDecoder
from bench.distributions import Sampling
from bench.engines import make_engine
from bench.pairs import load_pair
from bench.pairs import encode_prompt
from bench.tasks import Task, resolve_task
from bench.verifiers import make_verifier
from hub_checkpoints import FAMILIES, WINDOW, build_family
from tree_checks import OracleTree, check_tree_steps

ARCHITECTURES = ("llama3", "qwen3", "gemma3")
ENGINES = ("eager", pytest.param("compiled", marks=pytest.mark.slow))  # compiling: about a minute a pair
TREE_ENGINES = ENGINES
GREEDY = Sampling(temperature=0.0)
N = 3  # draft length: the target verifies N + 1 tokens a step
BUDGET = 16
ROWS = 3
# fp32 logits (the heads are scaled 20x, so logits are O(10)): measured differences are < 2e-5.
TOLERANCE = dict(rtol=1e-4, atol=1e-4)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The three real pair files, loaded offline from a hub cache of tiny checkpoints."""
    cache = tmp_path_factory.mktemp("hub")
    for name in ARCHITECTURES:
        build_family(cache, name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
        patch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        return {name: load_pair(name, device="cpu") for name in ARCHITECTURES}


@pytest.fixture(scope="module")
def texts():
    """The GSM8K task's prompt texts (zero-shot: the tiny vocabulary spells them in ~130 tokens)."""
    return [e.prompt for e in Task(resolve_task("gsm8k"), "fixture", num_fewshot=0).examples(ROWS)]


@pytest.fixture(scope="module")
def prompts(pairs, texts):
    """The ids the runner decodes for each pair (chat template on, as for the -it models)."""
    return {name: [encode_prompt(pair, t, chat_template=True) for t in texts] for name, pair in pairs.items()}


@pytest.fixture(scope="module")
def references(pairs, prompts):
    """transformers' greedy continuation of each prompt, decoded alone."""
    out = {}
    for name, pair in pairs.items():
        out[name] = [
            pair.target.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),  # else ids equal to pad are masked
                do_sample=False,
                max_new_tokens=BUDGET,
                eos_token_id=pair.eos_token_ids,
                pad_token_id=pair.eos_token_ids[0],
            )[0, len(p) :].tolist()
            for p in prompts[name]
        ]
    return out


@pytest.fixture(scope="module")
def factories():
    return {"eager": make_engine("eager"), "compiled": make_engine("compiled")}


def test_pair_files_load_the_real_classes_and_end_of_sequence_tokens(pairs):
    assert [type(m).__name__ for m in (pairs["llama3"].target, pairs["llama3"].draft)] == [
        "LlamaForCausalLM"
    ] * 2
    assert [type(m).__name__ for m in (pairs["gemma3"].target, pairs["gemma3"].draft)] == [
        "Gemma3ForConditionalGeneration"
    ] * 2
    llama = pairs["llama3"]
    assert [m.config.tie_word_embeddings for m in (llama.target, llama.draft)] == [False, True]  # 3.2 1B ties
    for name, family in FAMILIES.items():
        pair = pairs[name]
        eos = pair.tokenizer.convert_ids_to_tokens(pair.eos_token_ids)
        assert set(eos) == set(family["generation_eos"]), name  # every EOS of the generation config


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_prompt_ids_are_the_tokenizers_ids_of_the_task_text(name, pairs, prompts, texts):
    tok = pairs[name].tokenizer
    for text, ids in zip(texts, prompts[name]):
        templated = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert ids == list(templated)
        assert encode_prompt(pairs[name], text, chat_template=False) == tok(text).input_ids
        if tok.bos_token_id is not None:
            assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert tok.decode(prompts[name][0]).endswith(
        {
            "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "qwen3": "<|im_start|>assistant\n",
            "gemma3": "<start_of_turn>model\n",
        }[name]
    )
    assert len({len(p) for p in prompts[name]}) == ROWS, "the batch must be ragged"
    assert min(len(p) for p in prompts[name]) > 2 * WINDOW


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_different_prompts_continue_differently(name, references):
    assert len({tuple(r) for r in references[name]}) == ROWS, references[name]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_step_logits_equal_a_full_forward(name, engine, pairs, prompts, factories):
    """Prefill, then steps of 1 to N + 1 tokens, some rolled back as rejected drafts are: each row's
    logits equal transformers' forward of that row's whole sequence (no cache, its own masks)."""
    model = pairs[name].target
    engine_ = factories[engine](model, (N + 1,))
    seqs = [list(p) for p in prompts[name]]
    g = torch.Generator().manual_seed(0)

    def check(logits: torch.Tensor, fed: list[int], step: int) -> None:
        for row, (seq, n) in enumerate(zip(seqs, fed)):
            want = model(input_ids=torch.tensor([seq])).logits[0, -n:]
            torch.testing.assert_close(logits[row, :n], want, **TOLERANCE, msg=f"{name} {engine} step {step}")

    with torch.inference_mode():  # as the decoder: graphs compiled in start serve the steps
        engine_.start(ROWS, max(map(len, seqs)) + 8 * (N + 1))
        width = max(map(len, seqs))
        feed = torch.tensor([s + [0] * (width - len(s)) for s in seqs])  # right-padded prompts
        logits, _ = engine_.step(feed, [len(s) for s in seqs], keep=width, hidden=False)
        check(logits, [len(s) for s in seqs], 0)
        for step, (width, rolled_back) in enumerate([(N + 1, 2), (1, 0), (N + 1, N), (2, 1), (N + 1, 0)], 1):
            feed = torch.randint(3, model.config.get_text_config().vocab_size, (ROWS, width), generator=g)
            logits, _ = engine_.step(feed, [width] * ROWS, keep=width, hidden=False)
            seqs = [s + f for s, f in zip(seqs, feed.tolist())]
            check(logits, [width] * ROWS, step)
            seqs = [s[: len(s) - rolled_back] for s in seqs]
            engine_.truncate([len(s) for s in seqs])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_ar_and_sd_equal_transformers_generate(name, engine, pairs, prompts, references, factories):
    pair = pairs[name]
    rates = []
    for method in ("ar", "sd"):
        decoder = SpeculativeDecoder(
            pair.target,
            pair.draft if method == "sd" else None,
            make_verifier(method),
            draft_len=N,
            sampling=GREEDY,
            eos_token_ids=pair.eos_token_ids,
            engine=factories[engine],
        )
        batch = decoder.generate_batch(prompts[name], BUDGET, list(range(ROWS)))  # first: compiles 3 rows
        assert [g.token_ids for g in batch] == references[name], f"{name} {engine} {method}, ragged batch"
        for prompt, want in zip(prompts[name], references[name]):
            alone = decoder.generate(prompt, BUDGET)
            assert alone.token_ids == want, f"{name} {engine} {method}, batch 1"
            rates.append(alone.stats.acceptance_rate)
    assert any(r < 1 for r in rates[ROWS:]), "sd must reject drafts (and roll back) somewhere"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_lookup_sd_equals_transformers_generate(name, engine, pairs, prompts, references, factories):
    """Prompt lookup on every architecture: rows that found a continuation verify it at width
    N + 1 beside rows that found none (width 1), in a ragged batch and alone."""
    pair = pairs[name]
    decoder = SpeculativeDecoder(
        pair.target, None, make_verifier("sd"), draft_len=N, sampling=GREEDY, eos_token_ids=pair.eos_token_ids,
        engine=factories[engine], drafter="lookup",
    )  # fmt: skip
    batch = decoder.generate_batch(prompts[name], BUDGET, list(range(ROWS)))
    assert [g.token_ids for g in batch] == references[name], f"{name} {engine} lookup, ragged batch"
    for prompt, want in zip(prompts[name], references[name]):
        assert decoder.generate(prompt, BUDGET).token_ids == want, f"{name} {engine} lookup, batch 1"
    assert any(g.stats.drafting_rounds for g in batch), "no lookup found a continuation: nothing was tested"


TREE_NODES = 6  # a tree round verifies up to 6 nodes (7 tokens with the root)


@pytest.mark.parametrize("engine", TREE_ENGINES)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_tree_step_logits_equal_a_full_forward_of_each_path(name, engine, pairs, prompts, factories):
    """Token trees (bench/engines/tree.py) in ragged batches: every tree token's logits equal
    transformers' forward of its row's sequence and that token's path, then a random path per row
    is committed (its K/V moved into place) and the next steps read it; Gemma 3's sliding window
    (8) is shorter than the prompts, so tree tokens' windows are checked too."""
    model = pairs[name].target
    vocab = model.config.get_text_config().vocab_size
    engine_ = factories[engine](model, (1,), (TREE_NODES + 1,))
    seqs = [list(p) for p in prompts[name]]
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        engine_.start(ROWS, max(map(len, seqs)) + 6 * (TREE_NODES + 1))
        width = max(map(len, seqs)) - 1
        feed = torch.tensor([s[:-1] + [0] * (width - len(s) + 1) for s in seqs])
        engine_.step(feed, [len(s) - 1 for s in seqs], keep=1, hidden=False)
        rounds = [(6, 0, 3), (6, 6, 6), (1, 4, 2), (2, 5, 0)]
        check_tree_steps(model, engine_, seqs, rounds, vocab, g, **TOLERANCE)


@pytest.mark.parametrize("engine", TREE_ENGINES)
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_tree_sd_equals_transformers_generate(name, engine, pairs, prompts, references, factories):
    """Greedy tree rounds (a test drafter hiding transformers' continuation among distractor
    nodes): in a ragged batch and alone, token for token."""
    pair = pairs[name]
    vocab = pair.target.config.get_text_config().vocab_size
    decoder = SpeculativeDecoder(
        pair.target, None, make_verifier("sd"), draft_len=TREE_NODES, sampling=GREEDY,
        eos_token_ids=pair.eos_token_ids, engine=factories[engine],
        drafter=OracleTree([len(p) for p in prompts[name]], references[name], vocab),
    )  # fmt: skip
    batch = decoder.generate_batch(prompts[name], BUDGET, list(range(ROWS)))
    assert [g.token_ids for g in batch] == references[name], f"{name} {engine} tree, ragged batch"
    for prompt, want in zip(prompts[name], references[name]):
        decoder.drafter = OracleTree([len(prompt)], [want], vocab, seed=len(prompt))
        alone = decoder.generate(prompt, BUDGET)
        assert alone.token_ids == want, f"{name} {engine} tree, batch 1"
        assert alone.stats.verified_nodes > alone.stats.accepted_tokens > 0


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_greedy_model_tree_sd_equals_transformers_generate(name, pairs, prompts, references, factories):
    """The draft model's token tree (two levels of top-2, then one child each: 10 nodes), its
    levels stepped under the tree mask on the draft's own architecture: eager, ragged batch and alone."""
    pair = pairs[name]
    decoder = SpeculativeDecoder(
        pair.target, pair.draft, make_verifier("sd"), draft_len=10, sampling=GREEDY,
        eos_token_ids=pair.eos_token_ids, engine=factories["eager"], drafter="model_tree:depth=3,topk=2,branch=2",
    )  # fmt: skip
    batch = decoder.generate_batch(prompts[name], BUDGET, list(range(ROWS)))
    assert [g.token_ids for g in batch] == references[name], f"{name} model_tree, ragged batch"
    for prompt, want in zip(prompts[name], references[name]):
        assert decoder.generate(prompt, BUDGET).token_ids == want, f"{name} model_tree, batch 1"


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_method_decodes_on_the_compiled_engine_as_on_eager(name, pairs, prompts, factories):
    """Tokens and counters of every method, compiled against eager, in a ragged batch of the three
    prompts and at batch 1 (timed). On the graphs the compiled checks above compiled (after them in
    this module: nothing compiles here when they ran on this worker)."""
    from test_compiled import METHODS, decoder, same_stats

    pair = pairs[name]
    models = (pair.target, pair.draft, pair.eos_token_ids)
    for method in METHODS:
        eager, fast = (decoder(models, method, factories[e]) for e in ("eager", "compiled"))
        want = eager.generate_batch(prompts[name], BUDGET, list(range(ROWS)))
        got = fast.generate_batch(prompts[name], BUDGET, list(range(ROWS)))
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids, (name, method)
            same_stats(g.stats, w.stats)
        alone = fast.generate(prompts[name][0], BUDGET)
        assert alone.token_ids == want[0].token_ids and alone.stats.wall_time_s > 0, (name, method)
        if method == "sd":  # drafts accepted and rejected: both paths of the round ran
            rates = [g.stats.acceptance_rate for g in got]
            assert any(r > 0 for r in rates) and any(r < 1 for r in rates), (name, rates)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_mining_with_the_prompt_run_once_equals_a_full_forward_of_every_copy(name, pairs, prompts, references):
    """The judges' training reads (bench.learned.shared): swapped copies of prompt + completion
    scored in one tree forward, in a batch of questions, give transformers' full forward of each
    copy; the features at each drafted token are its last hidden state there (target, and the
    draft's where it predicted the token)."""
    from bench.learned.features import PairOracle, token_features
    from bench.learned.miners import Swapped

    pair = pairs[name]
    g = torch.Generator().manual_seed(1)
    calls, vocab = [], pair.target.config.get_text_config().vocab_size
    for prompt, completion in zip(prompts[name], references[name]):
        full, n = list(prompt) + list(completion), len(prompt)
        at = sorted(torch.randperm(len(completion) - 1, generator=g)[:4].tolist())
        calls.append(Swapped(full, [(n + t, int(torch.randint(vocab, (1,), generator=g))) for t in at], window=3))
    answers = PairOracle(pair).swapped(calls)

    def logp(model, ids):
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)

    for call, answer in zip(calls, answers):
        reference = logp(pair.target, call.ids)
        for (pos, token), (original, swapped) in zip(call.sites, answer):
            copy = call.ids[:pos] + [token] + call.ids[pos + 1 :]
            end = min(pos + call.window, len(call.ids) - 1)
            own = reference[pos - 1, token][None]  # the swapped-in token's log p, then the copy's top log p
            torch.testing.assert_close(original, reference[pos - 1 : end].max(-1).values, **TOLERANCE)
            torch.testing.assert_close(swapped, torch.cat([own, logp(pair.target, copy)[pos:end].max(-1).values]), **TOLERANCE)
    call = calls[0]
    sites = [(call.ids[:pos], token) for pos, token in call.sites]
    got = token_features(pair, "draft+target", sites)
    for (context, token), x in zip(sites, got):
        with torch.no_grad():
            h_t = pair.target(input_ids=torch.tensor([context + [token]]), output_hidden_states=True).hidden_states[-1][0, -1]
            h_d = pair.draft(input_ids=torch.tensor([context]), output_hidden_states=True).hidden_states[-1][0, -1]
        torch.testing.assert_close(x, torch.cat([h_d, h_t]).float(), **TOLERANCE)
