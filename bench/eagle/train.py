"""Training an EAGLE-3 draft head offline for any pair.

Why it is shaped this way: the head must be trained on what it will be asked to predict, the
target's own continuations, and with the authors' recipe so that the published loader reads it.
The stages each leave a file in the output folder and are skipped when their file exists, so a
killed run resumes where it stopped:

1. ``responses.jsonl``: the target's greedy responses to the training prompts (chat template),
   generated in batches with transformers' ``generate`` on the loaded target;
2. ``vocab.pt``: the reduced draft vocabulary, the most frequent response tokens, as the authors'
   ``d2t``/``t2d`` (SafeAILab/EAGLE eagle/traineagle3/cnets.py, ``Model.scandata``:
   ``d2t[i] = used_tokens[i] - i`` over the sorted ids, ``t2d[v] = v in used_tokens``);
3. ``features.pt``: one teacher-forced target pass per sequence: the hidden states entering
   layers 2, L//2 and L-3 (the authors' modeling_llama_kv.py collects exactly those), the final
   normed state (the target's logits restricted to the draft vocabulary are recomputed from it)
   and the target's argmax over its whole vocabulary;
4. ``checkpoint.pt``: training with training-time test (bench.eagle.ttt), written
   atomically every few steps; a resumed run says what it found;
5. ``config.json`` + ``model.safetensors``: the head in the published EAGLE-3 layout, and
   ``card.json`` with the data, steps, loss and held-out acceptance.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bench.errors import BenchError
from bench.pairs import Pair

Log = Callable[[str], None]
PACKAGED_PROMPTS = Path(__file__).resolve().parents[1] / "reference" / "smollm2-eagle" / "prompts.jsonl"


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to a temporary file then os.replace: a kill mid-write never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def read_prompts(path: Path, split: str) -> list[dict[str, Any]]:
    """The {source, row, split, prompt} lines of a prompts file (scripts/eagle_prompts.py) in one split."""
    if not path.is_file():
        raise BenchError(
            f"prompts file {path} not found; pass --prompts FILE.jsonl (lines with a 'prompt' field)"
        )
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    picked = [r for r in rows if r.get("split", "train") == split]
    redacted = sum("prompt" not in r and "sha256" in r for r in picked)
    if redacted:
        raise BenchError(
            f"prompts file {path}: {redacted} '{split}' prompts ship without their text (CNN/DM and XSum state no "
            "licence); rebuild it with scripts/eagle_prompts.py (docs/eagle-training.md) and pass --prompts"
        )
    if not picked or any("prompt" not in r for r in picked):
        raise BenchError(
            f"prompts file {path}: no '{split}' lines with a 'prompt' field; write it with scripts/eagle_prompts.py"
        )
    return picked


def take_evenly(prompts: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """At most ``limit`` prompts, the first ones of each domain in turn (file order within a
    domain; a file without domains: each source), so a smaller run keeps the mix of the kinds of
    text (not of the sources: 19 of the corpus's 28 are news templates) and its card can name the rows."""
    if limit is None or limit >= len(prompts):
        return prompts
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for p in prompts:
        by_kind.setdefault(p.get("domain", p.get("source", "")), []).append(p)
    picked: list[dict[str, Any]] = []
    for i in range(len(prompts)):
        picked += [rows[i] for rows in by_kind.values() if i < len(rows)][: limit - len(picked)]
        if len(picked) == limit:
            break
    order = {id(p): i for i, p in enumerate(prompts)}
    return sorted(picked, key=lambda p: order[id(p)])


def prompt_ids(pair: Pair, prompt: str, chat: bool) -> list[int]:
    """A prompt's ids as the harness encodes them (bench.build.encode_prompt)."""
    from bench.pairs import encode_prompt

    return encode_prompt(pair, prompt, chat_template=chat)


def _cut_at_eos(ids: list[int], eos: set[int]) -> list[int]:
    """A generated row up to and including its first EOS (generate pads the rest)."""
    ends = [i for i, tok in enumerate(ids) if tok in eos]
    return ids[: ends[0] + 1] if ends else ids


def feature_layers(num_layers: int) -> tuple[int, int, int]:
    """transformers' ``hidden_states`` indices EAGLE-3 fuses: the inputs of layers 2, L//2, L-3
    (the authors' modeling_llama_kv.py appends ``hidden_states`` before those layers run)."""
    return (2, num_layers // 2, num_layers - 3)


def _rows(
    gen: Any, width: int, encoded: list[list[int]], eos: set[int], layers: tuple[int, ...]
) -> list[dict[str, Any]]:
    """One record per row of a generate() batch: the sequence, the fused features and final
    (normed) states at every position but the last, and the target's argmax after each position.

    The generation pass is the teacher-forced pass: every position's states come from the target
    reading its own tokens, so no second forward is run. Left padding is cut off."""
    steps = [torch.cat([step[i] for step in gen.hidden_states], dim=1) for i in (*layers, -1)]
    argmax = torch.stack([logits.argmax(-1) for logits in gen.logits], dim=1)  # [B, new]
    out = []
    for b, e in enumerate(encoded):
        response = _cut_at_eos(gen.sequences[b, width:].tolist(), eos)
        pad, n = width - len(e), len(e) + len(response)
        feats = torch.cat([h[b, pad : pad + n - 1] for h in steps[:3]], dim=-1)
        # the prompt's positions hold the next prompt token (training masks them out)
        arg = torch.cat([torch.tensor(e[1:]), argmax[b, : len(response)]])
        out.append(
            {
                "prompt_len": len(e),
                "ids": torch.tensor(e + response),
                "feats": feats.clone(),
                "final": steps[3][b, pad : pad + n - 1].clone(),
                "argmax": arg,
            }
        )
    return out


@torch.no_grad()
def generate_features(
    pair: Pair, prompts: list[dict[str, Any]], folder: Path, new_tokens: int, batch: int, chat: bool, log: Log
) -> list[dict[str, Any]]:
    """The target's greedy responses with their features, one fp16 shard per batch in ``folder``
    (bench.eagle.shards: written atomically, memory-mapped when read; a rerun reads the
    shards it finds, by prompt, and generates the rest).

    Prompts are sorted by length so a batch wastes little left padding."""
    from bench.eagle.shards import key, read_shard, read_shards, write_shard

    folder.mkdir(parents=True, exist_ok=True)
    done = read_shards(folder)
    keys = [key(p) for p in prompts]
    if done:
        log(f"features: found {sum(k in done for k in keys)} of {len(prompts)} sequences already generated in {folder}")
    todo = sorted((i for i, k in enumerate(keys) if k not in done), key=lambda i: len(prompts[i]["prompt"]))
    eos, pad = set(pair.eos_token_ids), pair.eos_token_ids[0]
    layers = feature_layers(pair.target.config.num_hidden_layers)
    start, made = time.monotonic(), 0
    for b in range(0, len(todo), batch):
        chunk = todo[b : b + batch]
        encoded = [prompt_ids(pair, prompts[i]["prompt"], chat) for i in chunk]
        width = max(map(len, encoded))
        ids = torch.tensor([[pad] * (width - len(e)) + e for e in encoded], device=pair.device)
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded], device=pair.device)
        gen = pair.generating_target.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=sorted(eos),
            output_hidden_states=True,
            output_logits=True,
            return_dict_in_generate=True,
        )
        name = f"shard_{min(chunk):05d}_{len(done):06d}"
        rows = _rows(gen, width, encoded, eos, layers)
        write_shard(folder, name, dict(zip([keys[i] for i in chunk], rows, strict=True)))
        done.update(read_shard(folder, name))  # the memory-mapped views, as a rerun reads them
        made += len(chunk)
        rate = made / (time.monotonic() - start)
        log(
            f"features: {sum(k in done for k in keys)}/{len(prompts)} sequences, {rate:.3f} prompts/s, ETA {(len(todo) - made) / rate:.0f} s"
        )
    return [done[k] for k in keys]


def draft_vocab(
    records: list[dict[str, Any]], size: int, vocab: int, log: Log
) -> tuple[torch.Tensor, torch.Tensor]:
    """``d2t``, ``t2d`` of the ``size`` most frequent response tokens, in the authors' convention
    (cnets.py ``scandata``: ``used_tokens`` sorted, ``d2t[i] = used_tokens[i] - i``,
    ``t2d[v] = v in used_tokens``); ties broken by the smaller id. Where the responses hold fewer
    distinct tokens than ``size``, the most frequent prompt tokens fill the rest (the target copies
    names and numbers from its prompt; a token outside the vocabulary is never drafted). Fewer
    distinct tokens than ``size`` in prompts and responses together is refused."""
    counts = Counter(tok for r in records for tok in r["ids"][r["prompt_len"] :].tolist())
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]
    if len(top) < size:
        prompts = Counter(tok for r in records for tok in r["ids"][: r["prompt_len"]].tolist() if tok not in counts)
        top += sorted(prompts.items(), key=lambda kv: (-kv[1], kv[0]))[: size - len(top)]
    if len(top) < size:
        raise BenchError(
            f"draft vocabulary: prompts and responses hold {len(top)} distinct tokens, fewer than {size}; pass --draft-vocab {len(top)} or more prompts"
        )
    used = sorted(tok for tok, _ in top)
    share = sum(counts[tok] for tok, _ in top) / sum(counts.values())
    log(f"draft vocabulary: {size} tokens ({min(len(counts), size)} of the {len(counts)} distinct response tokens) cover {share:.2%} of the responses")
    d2t = torch.tensor(used) - torch.arange(size)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[torch.tensor(used)] = True
    return d2t, t2d


def head_config(pair: Pair, draft_vocab_size: int, layers: int = 1) -> dict[str, Any]:
    """config.json of the head in the published EAGLE-3 layout: the target's shapes, ``layers``
    layers (the authors' 1),
    ``draft_vocab_size``, and the rope base the head trains with (the target's: the authors'
    decoding code reads ``rope_theta`` from the head's config, see bench.eagle.heads)."""
    c = pair.target.config
    rope = getattr(c, "rope_parameters", None) or {}
    theta = float(rope.get("rope_theta", getattr(c, "rope_theta", 10000.0)))
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "hidden_act": c.hidden_act,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": theta,
        "max_position_embeddings": c.max_position_embeddings,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": draft_vocab_size,
        "tie_word_embeddings": False,
        "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id,
        "pad_token_id": c.pad_token_id,
        "torch_dtype": "float16",
    }


def new_head(pair: Pair, d2t: torch.Tensor, t2d: torch.Tensor, seed: int, from_target: bool, layers: int = 1) -> Any:
    """A fresh head on the target's frozen embedding. ``from_target`` starts ``lm_head`` at the
    target's output rows of the draft ids and ``norm`` at its final norm (the authors start them
    at random; with a CPU's few hundred steps this start matters), ``fc`` and ``midlayer`` at
    torch's defaults under ``seed``. Layers after the midlayer start with their output
    projections (``o_proj``, ``down_proj``) at zero: each is the identity at step 0, so a wider
    head starts as the one-layer head and only learns what the extra layer adds."""
    from bench.eagle.heads import Eagle3Head, HeadConfig

    torch.manual_seed(seed)
    head = Eagle3Head(HeadConfig.from_dict(head_config(pair, len(d2t), layers)))
    for layer in head.later_layers():
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    head.d2t.copy_(d2t)
    head.t2d.copy_(t2d)
    embedding = pair.target.get_input_embeddings()
    assert isinstance(embedding, torch.nn.Embedding)  # a causal LM's token embedding
    head.embed_tokens.weight.data = embedding.weight.detach().float().clone()
    head.embed_tokens.weight.requires_grad_(False)
    if from_target:
        head.lm_head.weight.data = target_rows(pair, t2d).clone()
        head.norm.weight.data = pair.target.model.norm.weight.detach().float().clone()
    return head


def target_rows(pair: Pair, t2d: torch.Tensor) -> torch.Tensor:
    """The target's output layer at the draft ids [Vd, H], in draft order (ids ascending)."""
    return pair.target.get_output_embeddings().weight.detach().float()[t2d]


def export_head(head: Any, config: dict[str, Any], folder: Path) -> Path:
    """config.json + model.safetensors in the published layout: fp16 weights, d2t (int64) and t2d
    (bool); no ``embed_tokens`` (EAGLE-3 reads the target's)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: (v.half() if v.is_floating_point() else v).contiguous()
        for k, v in head.state_dict().items()
        if k != "embed_tokens.weight"
    }
    tmp = folder / "model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder / "model.safetensors"


@dataclass(frozen=True)
class FitSettings:
    """What changes the trained head: steps, sequences per step, TTT depth (the authors' 7), AdamW
    (the authors' betas 0.9/0.95 and clipping 0.5; a CPU run needs a larger rate than their 5e-5
    over 800k steps) with linear warm-up then linear decay, and the seed of the init and order."""

    steps: int = 200
    batch: int = 8
    ttt_steps: int = 7
    lr: float = 1e-3
    warmup: int = 10
    clip: float = 0.5
    seed: int = 0
    log_every: int = 10
    save_every: int = 10
    dtype: str = "float32"  # "bfloat16": the head's products under autocast, weights and Adam in fp32
    eval_every: int = 0  # held-out loss every this many steps (0: never), the best head kept
    patience: int = 3  # stop after this many evaluations without a new best held-out loss
    context: int = 0  # prompt positions a training sequence keeps before its response (0: all)
    layers: int = 1  # the head's decoder layers (the authors' 1; more: bench.eagle.heads.Eagle3Head)


def batch_indices(step: int, batch: int, n: int, seed: int) -> list[int]:
    """The records of optimizer step ``step``: a fresh permutation per epoch from ``seed`` + epoch,
    so any step's batch is known without replaying the ones before (a resumed run sees the same)."""
    out = []
    for pos in range(step * batch, (step + 1) * batch):
        epoch, k = divmod(pos, n)
        out.append(int(torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))[k]))
    return out


def _schedule(s: FitSettings) -> Callable[[int], float]:
    """The learning-rate factor at step k: linear warm-up over ``warmup`` steps, then linear decay
    to a tenth at the last step."""
    return lambda k: (
        (k + 1) / s.warmup if k < s.warmup else 1.0 - 0.9 * (k - s.warmup) / max(s.steps - s.warmup, 1)
    )


def _resume(path: Path, head: Any, opt: Any, sched: Any, s: FitSettings, log: Log, then: str = "continuing") -> dict[str, Any]:
    """The checkpoint's progress, loaded into head/optimizer/schedule; fresh when there is none.
    A checkpoint made with other settings is refused (it would silently mix two runs)."""
    if not path.is_file():
        return {"step": 0, "history": [], "evals": [], "elapsed": 0.0}
    ck = torch.load(path, weights_only=False)
    # A setting added since the checkpoint was made reads as its default (what the code did then).
    if {**asdict(FitSettings()), **ck["settings"]} != asdict(s):
        raise BenchError(
            f"{path} was made with other settings ({ck['settings']}); use another --out or delete it"
        )
    head.load_state_dict(ck["head"], strict=False)
    opt.load_state_dict(ck["optim"])
    sched.load_state_dict(ck["sched"])
    last = ck["history"][-1]["loss"] if ck["history"] else float("nan")
    log(
        f"resumed: {path} holds step {ck['step']}/{s.steps} (loss {last:.4f}, {ck['elapsed']:.0f} s trained); {then}"
    )
    keep = ("step", "history", "evals", "elapsed", "best", "best_loss", "best_step", "stopped")
    return {"evals": [], **{k: ck[k] for k in keep if k in ck}}


@torch.no_grad()
def heldout_loss(head: Any, records: list[dict[str, Any]], target_w: torch.Tensor, s: FitSettings) -> float:
    """The 0.8^j-weighted TTT loss over every held-out record, in batches of ``s.batch`` (the
    quantity training lowers, on sequences it never reads): the curve's stopping signal."""
    from bench.eagle.shards import trim
    from bench.eagle.ttt import collate, ttt_losses, weighted

    total = 0.0
    with torch.autocast(target_w.device.type, dtype=torch.bfloat16, enabled=s.dtype == "bfloat16"):
        for b in range(0, len(records), s.batch):
            chunk = records[b : b + s.batch]
            batch = collate([trim(r, s.context) for r in chunk])
            total += float(weighted(ttt_losses(head, batch, target_w, s.ttt_steps)[0])) * len(chunk)
    return total / max(len(records), 1)


def _evaluate(head: Any, held: list[dict[str, Any]], target_w: torch.Tensor, s: FitSettings, state: dict[str, Any], log: Log) -> bool:
    """One held-out evaluation into ``state`` (its loss, and the head when it is the best yet);
    True when the last ``s.patience`` evaluations brought no new best: the loss stopped falling."""
    loss = heldout_loss(head, held, target_w, s)
    state["evals"].append({"step": state["step"], "loss": loss})
    if loss < state.get("best_loss", float("inf")):
        state["best_loss"], state["best_step"] = loss, state["step"]
        state["best"] = {k: v.clone() for k, v in head.state_dict().items() if k != "embed_tokens.weight"}
    since = sum(1 for e in state["evals"] if e["step"] > state["best_step"])
    log(f"step {state['step']}: held-out loss {loss:.4f} (best {state['best_loss']:.4f} at step {state['best_step']})")
    return since >= s.patience


def _save(ckpt: Path, state: dict[str, Any], spent: float, s: FitSettings, head: Any, opt: Any, sched: Any) -> None:
    """The checkpoint a resumed run continues from, written atomically."""
    trained = {k: v for k, v in head.state_dict().items() if k != "embed_tokens.weight"}
    extra = {"elapsed": state["elapsed"] + spent, "settings": asdict(s), "head": trained}
    atomic_save({**state, **extra, "optim": opt.state_dict(), "sched": sched.state_dict()}, ckpt)


def fit(
    head: Any, records: list[dict[str, Any]], target_w: torch.Tensor, s: FitSettings, ckpt: Path, log: Log,
    held: list[dict[str, Any]] | None = None, train: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Train ``head`` for ``s.steps`` optimizer steps (the 0.8^j-weighted TTT loss), checkpointing
    atomically every ``s.save_every`` steps and logging step, loss, step-0 accuracy, positions/s
    and time left every ``s.log_every``. With ``held`` and ``s.eval_every``, stop once the held-out
    loss stops falling and end on the best head. ``train`` False: no step, the checkpoint's head
    (its best) as it stands. Returns the progress (step, history, evals, elapsed)."""
    from bench.eagle.shards import trim
    from bench.eagle.ttt import collate, ttt_losses, weighted

    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(s))
    state = _resume(ckpt, head, opt, sched, s, log, "continuing" if train else "exporting its best head (--export-now)")
    began, positions, run_start = time.monotonic(), 0, state["step"]
    stop = state.get("stopped", False) or not train
    for step in range(state["step"], s.steps if not stop else state["step"]):
        batch = collate([trim(records[i], s.context) for i in batch_indices(step, s.batch, len(records), s.seed)])
        with torch.autocast(target_w.device.type, dtype=torch.bfloat16, enabled=s.dtype == "bfloat16"):
            losses, accs = ttt_losses(head, batch, target_w, s.ttt_steps)
            loss = weighted(losses)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, s.clip)
        opt.step()
        sched.step()
        positions += batch["tokens"].numel()
        value, step_losses = float(loss.detach()), [float(x.detach()) for x in losses]
        state["history"].append({"step": step + 1, "loss": value, "step_losses": step_losses, "acc": accs})
        state["step"] = step + 1
        spent = time.monotonic() - began
        if (step + 1) % s.log_every == 0 or step + 1 == s.steps:
            eta = spent / (step + 1 - run_start) * (s.steps - step - 1)
            log(
                f"step {step + 1}/{s.steps}  loss {value:.4f}  acc0 {accs[0]:.3f}  {positions / spent:.0f} positions/s  ETA {eta:.0f} s"
            )
        if held and s.eval_every and ((step + 1) % s.eval_every == 0 or step + 1 == s.steps):
            stop = state["stopped"] = _evaluate(head, held, target_w, s, state, log)
        if stop or (step + 1) % s.save_every == 0 or step + 1 == s.steps:
            _save(ckpt, state, spent, s, head, opt, sched)
        if stop:
            log(f"held-out loss stopped falling: stopping at step {step + 1}, keeping step {state['best_step']}")
            break
    state["elapsed"] += time.monotonic() - began
    if "best" in state:
        head.load_state_dict(state["best"], strict=False)
    return state


@dataclass(frozen=True)
class DraftJob:
    """One offline training of a pair's EAGLE-3 head: the prompts file (scripts/eagle_prompts.py),
    how many of its train prompts, the responses' length and batch, the draft vocabulary size,
    the fit and the chain depths whose held-out acceptance the card reports."""

    prompts: Path
    out: Path
    limit: int | None = None
    new_tokens: int = 128
    gen_batch: int = 16
    chat: bool = True
    draft_vocab: int = 2048
    init_from_target: bool = True
    fit: FitSettings = FitSettings()
    depths: tuple[int, ...] = (3, 5, 7)
    features: Path | None = None  # where the features live (default OUT/work): runs over subsets of one file share it
    export_now: bool = False  # no further step: the head and card from the checkpoint as it stands


def _vocab(
    job: DraftJob, records: list[dict[str, Any]], vocab: int, log: Log
) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft vocabulary, cached in work/vocab.pt (a resumed run keeps the one it trained with)."""
    path = job.out / "work" / "vocab.pt"
    if path.is_file():
        cached = torch.load(path, weights_only=True)
        if len(cached["d2t"]) == job.draft_vocab:
            return cached["d2t"], cached["t2d"]
        raise BenchError(
            f"{path} holds a {len(cached['d2t'])}-token vocabulary, not {job.draft_vocab}; use another --out"
        )
    d2t, t2d = draft_vocab(records, job.draft_vocab, vocab, log)
    atomic_save({"d2t": d2t, "t2d": t2d}, path)
    return d2t, t2d


def _sources(prompts: list[dict[str, Any]]) -> dict[str, str]:
    """Which rows of which source a list of prompts holds, as ``source: first..last (n rows)``."""
    rows: dict[str, list[int]] = {}
    for p in prompts:
        rows.setdefault(p.get("source", "prompts"), []).append(int(p.get("row", 0)))
    return {k: f"rows {min(v)}..{max(v)} ({len(v)})" for k, v in rows.items()}


def _features(pair: Pair, job: DraftJob, split: str, log: Log) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A split's prompts (train: at most ``job.limit``, evenly over sources) and their features,
    generated where missing (a prompts file without 'valid' lines gives none)."""
    if split == "valid" and not any(p.get("split") == "valid" for p in _lines(job.prompts)):
        return [], []
    prompts = read_prompts(job.prompts, split)
    prompts = take_evenly(prompts, job.limit) if split == "train" else prompts
    folder = (job.features or job.out / "work") / f"features_{split}"
    return prompts, generate_features(pair, prompts, folder, job.new_tokens, job.gen_batch, job.chat, log)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def by_domain(prompts: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by their prompt's ``domain`` (scripts/eagle_prompts.py), in file order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for p, r in zip(prompts, records, strict=True):
        out.setdefault(p.get("domain", p.get("source", "prompts")), []).append(r)
    return out


def train_draft(pair: Pair, job: DraftJob, log: Log = print) -> dict[str, Any]:
    """Every stage of the module docstring, each resumed from its file; writes the head and its
    card into ``job.out`` and returns the card. The 'valid' prompts stop training (held-out loss);
    the 'heldout' ones, never read before, give the card's acceptance, overall and per domain."""
    from bench.eagle.ttt import chain_acceptance

    work, began = job.out / "work", time.monotonic()
    held_p, held = _features(pair, job, "heldout", log)
    _, valid = _features(pair, job, "valid", log)
    train_p, train = _features(pair, job, "train", log)
    generated = time.monotonic() - began
    d2t, t2d = _vocab(job, train, pair.target.config.vocab_size, log)
    head = new_head(pair, d2t, t2d, job.fit.seed, job.init_from_target, job.fit.layers)
    log(
        f"training: {len(train)} sequences, {_response_tokens(train)} response tokens, "
        f"{job.fit.steps} steps of {job.fit.batch}, TTT depth {job.fit.ttt_steps}"
    )
    state = fit(head, train, target_rows(pair, t2d), job.fit, work / "checkpoint.pt", log, held=valid, train=not job.export_now)
    head.eval()
    accept = [chain_acceptance(head, held, d) for d in job.depths]
    domains = {d: chain_acceptance(head, rs, 5) | {"coverage": coverage(rs, t2d)} for d, rs in by_domain(held_p, held).items()}
    export_head(head, head_config(pair, job.draft_vocab, job.fit.layers), job.out)
    seconds = {
        "features_this_run": round(generated),
        "training_total": round(state["elapsed"]),
        "this_run": round(time.monotonic() - began),
    }
    ended = "held-out loss stopped falling" if state.get("stopped") and not job.export_now else "steps done"
    ended = "exported as it stood (--export-now)" if job.export_now and state["step"] < job.fit.steps else ended
    card = _card(pair, job, (train_p, held_p), (train, held), state, accept, seconds) | {"heldout_by_domain": domains, "ended": ended}
    (job.out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    for a in accept:
        log(f"held-out greedy chain, depth {a['depth']}: {a['tokens_per_round']:.3f} tokens per round ({a['rounds']} rounds)")
    for d, a in domains.items():
        log(f"  {d}: {a['tokens_per_round']:.3f} tokens per round at depth 5, draft vocabulary covers {a['coverage']:.2%}")
    return card


def coverage(records: list[dict[str, Any]], t2d: torch.Tensor) -> float:
    """Share of the target's greedy response tokens that the draft vocabulary holds: a token
    outside it can never be drafted."""
    toks = torch.cat([torch.as_tensor(r["ids"][r["prompt_len"] :]) for r in records]) if records else torch.zeros(0, dtype=torch.long)
    return float(t2d[toks].float().mean()) if len(toks) else float("nan")


def rows_sha256(path: Path) -> str:
    """sha256 of a prompts file's (source, row, split) lines: the same for the file a head trained on
    and for its shipped copy, whose CNN/DM and XSum prompts are hashes (scripts/eagle_prompts.py)."""
    import hashlib

    keys = [[r.get("source"), r.get("row"), r.get("split", "train")] for r in _lines(path)]
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()


def _response_tokens(records: list[dict[str, Any]]) -> int:
    """Tokens the target generated (what the loss and the card count), over records."""
    return sum(len(r["ids"]) - r["prompt_len"] for r in records)


def _card(
    pair: Pair, job: DraftJob, prompts: tuple[list, list], records: tuple[list, list], state: dict[str, Any],
    accept: list[dict[str, Any]], seconds: dict[str, int],
) -> dict[str, Any]:  # fmt: skip
    """card.json: which prompts (rows per source, the file's hash), the responses, the settings,
    the loss over the last 10 steps and the held-out acceptance."""
    import hashlib

    last = state["history"][-10:]
    step_losses = [sum(h["step_losses"][j] for h in last) / len(last) for j in range(job.fit.ttt_steps)] if last else []
    return {
        "pair": pair.spec.name,
        "target": pair.spec.target,
        "kind": "eagle3",
        "prompts": {
            "file": job.prompts.name,
            "sha256": hashlib.sha256(job.prompts.read_bytes()).hexdigest(),
            "rows_sha256": rows_sha256(job.prompts),
            "train": _sources(prompts[0]),
            "heldout": _sources(prompts[1]),
        },
        "responses": {
            "decoding": "greedy, the target's own",
            "chat_template": job.chat,
            "max_new_tokens": job.new_tokens,
            "train_sequences": len(records[0]),
            "train_response_tokens": _response_tokens(records[0]),
            "heldout_sequences": len(records[1]),
        },
        "draft_vocab_size": job.draft_vocab,
        "init_from_target": job.init_from_target,
        "fit": asdict(job.fit),
        "steps_done": state["step"],
        "heldout_loss": state.get("evals", []),
        "best_step": state.get("best_step"),
        "final_loss": sum(h["loss"] for h in last) / max(len(last), 1),
        "final_step_losses": step_losses,
        "heldout_acceptance": accept,
        "seconds": seconds,
    }


def train_draft_command(
    pair: str,
    out: Path,
    prompts: Path | None,
    num_prompts: int | None,
    new_tokens: int,
    gen_batch: int,
    draft_vocab: int,
    steps: int,
    batch: int,
    ttt_steps: int,
    lr: float,
    seed: int,
    chat_template: bool,
    device: str,
    dtype: str | None,
    command: str,
    log: Log = print,
    features: Path | None = None,
    train_dtype: str = "float32",
    eval_every: int = 0,
    patience: int = 3,
    context: int = 0,
    export_now: bool = False,
    layers: int = 1,
) -> dict[str, Any]:
    """`diversed-bench train-draft`: load the pair, train its head with these flags, return the
    card (which records ``command``, the line that made it)."""
    from bench.pairs import load_pair

    if train_dtype not in ("float32", "bfloat16"):
        raise BenchError(f"--train-dtype {train_dtype}: use float32 or bfloat16")
    if layers < 1:
        raise BenchError(f"--layers {layers}: a head has at least one layer")
    fit_settings = FitSettings(
        steps=steps, batch=batch, ttt_steps=ttt_steps, lr=lr, seed=seed, dtype=train_dtype, eval_every=eval_every, patience=patience,
        context=context, layers=layers,
    )
    job = DraftJob(
        prompts=prompts or PACKAGED_PROMPTS,
        out=out,
        limit=num_prompts,
        new_tokens=new_tokens,
        gen_batch=gen_batch,
        chat=chat_template,
        draft_vocab=draft_vocab,
        fit=fit_settings,
        features=features,
        export_now=export_now,
    )
    card = {**train_draft(load_pair(pair, device=device, dtype=dtype), job, log), "command": command}
    (out / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    return card
