"""Fit, measure and write the smollm2 pair's early-exit draft (bench/reference/smollm2-draft).

SmolLM2-135M-Instruct has no smaller sibling with its tokenizer in any package, so its draft is
made from it: the first k of its 30 layers, a unit-weight RMSNorm, and the output layer
``W_E M`` (bench/early_exit.py). ``M`` (576 x 576) maps layer k's normalised residual state to the
target's final normalised state, fitted by ridge least squares (closed form, deterministic).

Text, all offline: the shipped task fixtures (tasks/fixtures: gsm8k, cnndm, xsum, mbpp) under the
chat template, each followed by the target's own continuations (one greedy, two sampled at T = 1,
seeded). The map is fitted on every position of the TRAIN-split prompts and their continuations;
acceptance is measured on the continuations of the TEST-split prompts only:

- T=1: sum_x min(p, q), the probability that sd accepts a drafted token, averaged over positions;
- greedy: how often argmax q = argmax p on the greedy continuations (what greedy sd accepts).

Cost is counted, not timed: weights a decode step reads (at batch 1 every step reads them all, so
on a GPU this is its time) and multiply-adds per token, draft over target. Usage (one thread,
about 10-20 min on a shared 2-core CPU, most of it the target's own generations):

    python scripts/make_smollm2_draft.py --layers 2,4,8,12,16,20,24 --write 24
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from bench.early_exit import build_early_exit_draft, save_correction
from bench.fetch import FetchSource, fetched_model
from bench.pairs import resolve_pair
from bench.speed.steps import ideal_speedup
from bench.tasks import Task, resolve_task

TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")
RIDGE = 1e-4  # relative to the mean of u u^T (unit scale): barely more than numerical safety
OUT = Path(__file__).resolve().parents[1] / "bench" / "reference" / "smollm2-draft"


class Target:
    """The fetched target alone (the pair's draft is what this script makes)."""

    def __init__(self) -> None:
        spec = resolve_pair("smollm2")
        self.source = FetchSource.of(spec.name, spec.fetch)
        folder = fetched_model(spec.name, self.source)
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(folder)
        self.model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        self.model.requires_grad_(False)  # its tensors meet inference-mode states below
        self.eos = self.tokenizer.eos_token_id


def prompts(pair: Target, split: str) -> list[list[int]]:
    """Every fixture example of ``split``, as the runner encodes it under the chat template."""
    tok = pair.tokenizer
    out = []
    for task in TASKS:
        for example in Task(resolve_task(task), "fixture", split=split).examples():
            chat = tok.apply_chat_template(
                [{"role": "user", "content": example.prompt}], add_generation_prompt=True, tokenize=False
            )
            out.append(list(tok(chat, add_special_tokens=False).input_ids))
    return out


@torch.inference_mode()
def continuations(pair: Target, ids: list[int], tokens: int, samples: int) -> list[tuple[list[int], bool]]:
    """(prompt + continuation, greedy?) for one greedy and ``samples`` T = 1 continuations,
    cut after the first EOS."""
    x = torch.tensor([ids])
    runs = [
        (
            pair.model.generate(
                x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                max_new_tokens=tokens,
                pad_token_id=pair.eos,
            ),
            True,
        )
    ]
    if samples:
        many = x.expand(samples, -1)
        sampled = pair.model.generate(
            many,
            attention_mask=torch.ones_like(many),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=tokens,
            pad_token_id=pair.eos,
        )
        runs.append((sampled, False))
    out = []
    for rows, greedy in runs:
        for row in rows.tolist():
            new = row[len(ids) :]
            ends = [i for i, t in enumerate(new) if t == pair.eos]
            out.append((ids + new[: ends[0] + 1 if ends else len(new)], greedy))
    return out


def unit(h: Tensor, eps: float) -> Tensor:
    """h / rms(h): the draft's final norm with unit weight."""
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


@torch.inference_mode()
def states(
    pair: Target,
    seqs: list[tuple[list[int], bool]],
    plens: list[int],
    layers: Sequence[int],
    generated_only: bool,
) -> dict[str, Tensor]:
    """Per position that predicts a next token: layer k's unit-normalised state for each k, the
    target's final normalised state, and whether the sequence is the greedy continuation."""
    eps = pair.model.config.rms_norm_eps
    got: dict[str, list[Tensor]] = {"final": [], "greedy": [], **{f"u{k}": [] for k in layers}}
    for (seq, greedy), plen in zip(seqs, plens):
        lo, hi = (plen - 1 if generated_only else 0), len(seq) - 1
        if hi <= lo:
            continue
        hidden = pair.model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states
        for k in layers:
            got[f"u{k}"].append(unit(hidden[k][0, lo:hi], eps))
        got["final"].append(hidden[-1][0, lo:hi])  # after the target's final norm
        got["greedy"].append(torch.full((hi - lo,), greedy))
    return {k: torch.cat(v) for k, v in got.items()}


def fit_map(u: Tensor, final: Tensor, ridge: float = RIDGE) -> Tensor:
    """argmin_M mean ||M u - final||^2 + ridge ||M||^2, in float64."""
    x, y = u.double(), final.double()
    gram = x.T @ x / len(x) + ridge * torch.eye(x.shape[1], dtype=torch.float64)
    return torch.linalg.solve(gram, x.T @ y / len(x)).T.float()


def acceptance(head: Tensor, final: Tensor, draft_state: Tensor, greedy: Tensor) -> dict[str, float]:
    """Mean sum_x min(p, q) over all positions and over the sampled continuations', and greedy
    agreement on the greedy continuations'; p, q at T = 1 from ``final`` and ``draft_state``."""
    t1, agree = [], []
    for s in range(0, len(final), 512):
        lp, lq = final[s : s + 512] @ head.T, draft_state[s : s + 512] @ head.T
        t1.append(torch.minimum(lp.softmax(-1), lq.softmax(-1)).sum(-1))
        agree.append((lp.argmax(-1) == lq.argmax(-1)).float())
    t1_, agree_ = torch.cat(t1), torch.cat(agree)
    return {
        "t1": t1_.mean().item(),
        "t1_sampled": t1_[~greedy].mean().item(),
        "greedy": agree_[greedy].mean().item(),
    }


def cost(pair: Target, k: int) -> float:
    """Draft / target weights read (= multiply-adds) per decoded token: k of the target's layers
    plus the output layer, against all of them plus the output layer (embedding lookups are free)."""
    layer = sum(p.numel() for p in pair.model.model.layers[0].parameters())
    head = pair.model.lm_head.weight.numel()
    return (k * layer + head) / (pair.model.config.num_hidden_layers * layer + head)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,4,8,12,16,20,24", help="candidate k, comma-separated")
    parser.add_argument("--write", type=int, default=None, help="write the correction for this k")
    parser.add_argument("--fit-tokens", type=int, default=96)
    parser.add_argument("--eval-tokens", type=int, default=64)
    parser.add_argument("--samples", type=int, default=2, help="T = 1 continuations per prompt")
    parser.add_argument("--draft-len", type=int, default=3, help="N of the ideal speedup column")
    parser.add_argument("--out", type=Path, default=OUT, help="folder the correction is written to")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = sorted({int(k) for k in args.layers.split(",")} | ({args.write} if args.write else set()))
    pair = Target()
    head = pair.model.lm_head.weight
    norm = pair.model.model.norm.weight
    data = {}
    for split, tokens, generated_only in (
        ("train", args.fit_tokens, False),
        ("test", args.eval_tokens, True),
    ):
        tick = time.perf_counter()
        seqs, plens = [], []
        for ids in prompts(pair, split):
            for seq in continuations(pair, ids, tokens, args.samples):
                seqs.append(seq)
                plens.append(len(ids))
        data[split] = states(pair, seqs, plens, layers, generated_only)
        print(
            f"{split}: {len(seqs)} sequences, {len(data[split]['final'])} positions, "
            f"{time.perf_counter() - tick:.0f} s",
            flush=True,
        )
    train, test = data["train"], data["test"]
    rows, maps = [], {}
    for k in layers:
        maps[k] = fit_map(train[f"u{k}"], train["final"])
        plain = acceptance(head, test["final"], norm * test[f"u{k}"], test["greedy"])
        fitted = acceptance(head, test["final"], test[f"u{k}"] @ maps[k].T, test["greedy"])
        c = cost(pair, k)
        rows.append(
            {
                "layers": k,
                "cost": c,
                "plain": plain,
                "fitted": fitted,
                "ideal_speedup": ideal_speedup(fitted["greedy"], args.draft_len, c),
            }
        )
    print(
        "\n| k | cost / target step | T=1, plain | greedy, plain | T=1, fitted | T=1 sampled, fitted "
        f"| greedy, fitted | ideal S (greedy, N={args.draft_len}) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, f = r["plain"], r["fitted"]
        print(
            f"| {r['layers']} | {r['cost']:.2f} | {p['t1']:.3f} | {p['greedy']:.3f} | {f['t1']:.3f} | "
            f"{f['t1_sampled']:.3f} | {f['greedy']:.3f} | {r['ideal_speedup']:.2f} |"
        )
    if args.write is None:
        return
    k = args.write
    mine = next(r for r in rows if r["layers"] == k)
    draft = build_early_exit_draft(pair.model, k, maps[k])
    probe = torch.tensor([prompts(pair, "test")[0]])
    with torch.inference_mode():  # the folded model computes W_E (M u_k) itself
        hidden = pair.model(input_ids=probe, output_hidden_states=True).hidden_states[k][0]
        u = unit(hidden, pair.model.config.rms_norm_eps)
        torch.testing.assert_close(
            draft(input_ids=probe).logits[0], (u @ maps[k].T) @ head.T, rtol=1e-4, atol=1e-4
        )
    card = {
        "layers": k,
        "target_sha256": pair.source.member_sha256,
        "ridge": RIDGE,
        "fitted_on": f"{len(train['final'])} positions: train-split fixture prompts of {', '.join(TASKS)} "
        f"(chat template) and the target's continuations (1 greedy + {args.samples} at T=1, "
        f"{args.fit_tokens} tokens)",
        "measured_on": f"{len(test['final'])} continuation positions of the test-split prompts "
        f"(1 greedy + {args.samples} at T=1, {args.eval_tokens} tokens)",
        "acceptance": {key: round(v, 4) for key, v in mine["fitted"].items()},
        "cost_per_token_vs_target": round(mine["cost"], 4),
        "made_by": "python scripts/make_smollm2_draft.py "
        + " ".join(
            f"--{a.replace('_', '-')} {v}" for a, v in vars(args).items() if v is not None and a != "out"
        ),
    }
    save_correction(args.out, maps[k], card)
    print(f"\nwritten to {args.out}:\n{json.dumps(card, indent=2)}")


if __name__ == "__main__":
    main()
