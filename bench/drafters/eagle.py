"""EAGLE's learned draft head as a drafter (arXiv 2401.15077, 2406.16858, 2503.01840): the head
(``bench.eagle.heads``) reads the target's layer states of every token the target kept
(``Drafter.target_layers``/``take_states``) and drafts by feeding its own output state back, as
the authors' ``topK_genrate`` does (SafeAILab/EAGLE ``eagle/model/cnets.py``).

Its law q is the head's softmax over the draft vocabulary put into the target's vocabulary through
``d2t``, zero on every target id the draft vocabulary lacks: a real distribution over the target's
vocabulary, so every verifier reads it (``q_logits`` likewise, -1e9 off the draft vocabulary so a
softmax gives exactly zero there and a mix of logits stays finite; ``hidden`` is what the head's
lm_head reads). ``tree=1`` drafts EAGLE-2's dynamic tree (``bench.drafters.eagle_tree``).

Each row keeps its own head cache (the positions the target confirmed; a round's drafting writes
past it and is dropped, as ``stable_kv`` in ``cnets.py``) and is drafted alone, in batch order:
a row's draws are the ones it makes decoded alone. On ``--engine compiled`` that cache is the row's
slots in static buffers and the head's forwards run compiled (``bench.engines.compiled_head``: the
same head code, the same outputs), so EAGLE is timed against compiled ``ar``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.distributions import pick, process
from bench.drafters.base import Draft, DraftContext, Drafter, DraftRow
from bench.drafters.eagle_tree import draft_tree
from bench.eagle.heads import CacheKV, Eagle1Head, EagleHead, load_eagle_head
from bench.engines import CompiledEngines
from bench.engines.compiled_head import CAUSAL, MASKED, CompiledHead, HeadCacheLayout, HeadShape
from bench.errors import BenchError

OFF_VOCAB = -1e9  # a q_logit off the draft vocabulary: exp underflows to exactly 0
# A row's head cache: the eager head's (keys, values) per layer, or, on the compiled engine, the
# slots its row holds in the compiled head's static buffers (bench.engines.compiled_head).
HeadCache = list[CacheKV] | int | None


@dataclass
class RowState:
    """One row's head: its cache over the confirmed positions, the target states not yet read,
    and the output at the last confirmed position (which predicts the row's next token)."""

    cache: HeadCache = None
    fed: int = 0  # head positions in the cache: (state of target position i, token i + 1)
    pending: list[Tensor] = field(default_factory=list)
    last: Tensor | None = None  # [1, H]
    ran: int = 0  # head forwards run for the row in the round being drafted (Draft.forwards)


def with_pair_head(spec: str, pair_head: str | None) -> str:
    """An ``eagle`` drafter spec without ``path`` gets the pair file's head (``eagle:`` field);
    any other spec is returned as is."""
    name, _, rest = spec.strip().partition(":")
    items = [item.strip() for item in rest.split(",") if item.strip()]
    given = [item for item in items if item.startswith("path=")]
    if name != "eagle" or not pair_head or any(item != "path=" for item in given):
        return spec
    # An empty path (a configuration's canonical spec, every parameter written out) is no path.
    return ",".join([f"eagle:path={pair_head}", *(item for item in items if item != "path=")])


def draft_head_source(path: str) -> str:
    """A head path as written in a pair file or on the command line: a folder (relative ones are
    tried against the package, as ``bench/reference/...``), else a hub repo id."""
    package = Path(__file__).resolve().parent.parent / path
    return str(package) if path and not Path(path).is_absolute() and package.is_dir() else path


@dataclass
class EagleDrafter(Drafter):
    """Drafts with an EAGLE-3 or EAGLE-1 head: a chain (at T > 0 the *sampled chain*, each token a
    draw from q, so the relaxed verifiers have a q to read), or (``tree=1``) EAGLE-2's dynamic tree
    of at most ``total`` nodes, ``depth`` levels, ``topk`` children per expanded node: the authors'
    drafting at every temperature, the top-k children verified by the q-free rule."""

    name: ClassVar[str] = "eagle"
    help: ClassVar[str] = (
        "an EAGLE draft head reading the target's states: path=FOLDER_OR_REPO (none: the pair file's head); "
        "tree=0: a chain, the head's argmax at T = 0 and at T > 0 the sampled chain (draws from q, which the relaxed verifiers read); "
        "tree=1: the authors' drafting at every temperature, EAGLE-2's top-k dynamic tree of at most total nodes, depth levels, "
        "topk children, verified by the q-free rule (docs/eagle.md)"
    )
    supplies: ClassVar[frozenset[str]] = frozenset({"q", "q_logits", "hidden"})
    models: ClassVar[frozenset[str]] = frozenset({"target"})
    speed: ClassVar[str] = "head"
    path: str = ""
    tree: int = 0
    topk: int = 4
    depth: int = 5
    total: int = 16

    def __post_init__(self) -> None:
        for key in ("topk", "depth", "total"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BenchError(f"eagle: {key} must be an integer >= 1, got {value!r}")
        if self.tree not in (0, 1):
            raise BenchError(f"eagle: tree takes 0 (a chain) or 1 (EAGLE-2's dynamic tree), got {self.tree!r}")
        self.rows: dict[int, RowState] = {}

    def bind(self, ctx: DraftContext) -> EagleDrafter:
        """Load the head named by ``path`` for the context's target (``build_decoder`` fills an
        empty path from the pair file's ``eagle`` field)."""
        target, sampling, greedy = ctx.target, ctx.sampling, ctx.greedy
        assert target is not None  # make_drafter refuses a context without the models it declares
        if not self.path:
            raise BenchError("eagle: no head for this pair; pass --drafter eagle:path=FOLDER_OR_REPO (docs/eagle.md lists the published ones)")
        source = draft_head_source(self.path)
        if self.path.startswith("reference/") and not Path(source).is_dir():
            raise BenchError(f"eagle: the pair's head bench/{self.path} is not there; train it (docs/eagle.md, 'Training') or pass --drafter eagle:path=FOLDER")
        self.head: EagleHead = load_eagle_head(source, target).to(target.device, target.dtype).eval()
        self.device, self.sampling, self.greedy = target.device, sampling, greedy
        self.vocab = target.config.get_text_config().vocab_size
        self.compiled = self.compile(ctx, source) if isinstance(ctx.engine, CompiledEngines) else None
        if self.compiled is not None:
            self.head = self.compiled.head  # type: ignore[assignment]  # the same weights, the graphs' module
        return self

    def compile(self, ctx: DraftContext, source: str) -> CompiledHead:
        """The head's steps compiled beside the target's (``--engine compiled``): the catch-up over
        at most a round's confirmed states (N + 1 in a chain, a tree's deepest path and its root),
        and a chain's one-token step or a tree level's ``topk`` nodes, reading the head's output."""
        assert ctx.target is not None
        config, engine = self.head.config, ctx.engine
        text = ctx.target.config.get_text_config()
        fused = len(self.target_layers(text.num_hidden_layers)) * text.hidden_size
        layers = config.num_hidden_layers if isinstance(self.head, Eagle1Head) else 1
        layout = HeadCacheLayout(layers, config.num_key_value_heads or config.num_attention_heads, config.dim)
        if self.tree:
            k = min(self.topk, self.head.draft_vocab)
            shapes = [HeadShape(CAUSAL, min(self.depth, ctx.draft_len) + 1, fused), HeadShape(MASKED, k, config.hidden_size)]
        else:
            shapes = [HeadShape(CAUSAL, ctx.draft_len + 1, fused), HeadShape(CAUSAL, 1, config.hidden_size)]
        assert isinstance(engine, CompiledEngines)
        return engine.head(ctx.target, source, self.head, layout, shapes)

    def run(
        self, row: DraftRow, hidden: Tensor, tokens: Tensor, cache: HeadCache, positions: Tensor | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, HeadCache]:
        """One head forward for ``row`` after its ``cache`` (``EagleHead.forward``'s arguments):
        the eager head's, or the compiled one's over the row's static slots."""
        if self.compiled is None:
            assert not isinstance(cache, int)
            return self.head(hidden, tokens, positions=positions, cache=cache, mask=mask)
        assert not isinstance(cache, list)
        return self.compiled(row.index, hidden, tokens, cache or 0, positions, mask)

    def target_layers(self, num_layers: int) -> tuple[int, ...]:
        return self.head.target_layers(num_layers)

    def target_widths(self, cap: int) -> tuple[int, ...]:
        return (1,) if self.tree else (cap + 1,)

    def tree_widths(self, cap: int) -> tuple[int, ...]:
        return (1 + min(cap, self.total),) if self.tree else ()

    def start(self, rows: int, max_len: int) -> None:
        self.rows = {}
        if self.compiled is not None:
            self.compiled.start(rows, max_len)

    def take_states(self, rows: Sequence[DraftRow], states: Sequence[Tensor]) -> None:
        for row, kept in zip(rows, states):
            self.rows.setdefault(row.index, RowState()).pending.append(kept.to(self.device))

    def catch_up(self, row: DraftRow) -> RowState:
        """Feed the head the row's target states not read yet, each with the token after it."""
        state = self.rows.setdefault(row.index, RowState())
        if state.pending:
            feats = torch.cat(state.pending).unsqueeze(0)
            state.pending, n = [], feats.shape[1]
            if n == 0:
                return state
            tokens = torch.tensor([row.seq[state.fed + 1 : state.fed + 1 + n]], dtype=torch.long, device=self.device)
            if tokens.shape[1] != n:
                raise RuntimeError(f"eagle: {n} target states for {tokens.shape[1]} tokens")  # the loop's contract broke
            out, state.cache = self.run(row, feats, tokens, state.cache)
            state.fed, state.last, state.ran = state.fed + n, out[:, -1], state.ran + 1
        return state

    def law(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """At head outputs [..., H]: the draft-vocabulary logits, q and q_logits in the target's
        vocabulary."""
        logits = self.head.logits(out).float()
        q = self.head.target_probs(process(logits, self.sampling))
        wide = logits.new_full((*logits.shape[:-1], self.vocab), OFF_VOCAB)
        ids = self.head.to_target(torch.arange(logits.shape[-1], device=logits.device)).expand_as(logits)
        return logits, q, wide.scatter_(-1, ids, logits)

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        """The rows' chains (or trees), with the head forwards each row ran: the catch-up over
        the states the target confirmed since its last round (when there are any), then one per
        chain token after the first, or one per tree level after the root's children."""
        for row in rows:
            self.rows.setdefault(row.index, RowState()).ran = 0
        if self.tree:
            made = draft_tree(self, rows, caps)
        else:
            made = stack_chains([self.chain(row, cap) if cap else None for row, cap in zip(rows, caps)], self.vocab, self.device)
        made.forwards = [self.rows[row.index].ran for row in rows]
        return made

    def chain(self, row: DraftRow, cap: int) -> dict[str, Tensor] | None:
        """Up to ``cap`` tokens for one row, one head step each; None before the head has a state."""
        state = self.catch_up(row)
        if state.last is None:
            return None
        out: dict[str, list[Tensor]] = {"tokens": [], "q": [], "q_logits": [], "hidden": []}
        h, cache = state.last, state.cache
        for step in range(cap):
            drawn = self.propose(h, row.generator)
            for key, value in zip(out, drawn):
                out[key].append(value)
            if step + 1 < cap:
                h, cache = self.advance(row, h, drawn[0], cache)
                state.ran += 1
        return {k: torch.cat(v) for k, v in out.items()}

    def propose(self, h: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """A chain's token at head output ``h`` [1, H]: (token in the target's vocabulary, q,
        q_logits, hidden), the head's argmax when greedy, else a draw from q."""
        logits, q, wide = self.law(h)
        token = self.head.to_target(logits.argmax(-1)) if self.greedy else pick(q, [generator], False)
        return token, q, wide, self.head.head_input(h)

    def advance(self, row: DraftRow, h: Tensor, token: Tensor, cache: HeadCache) -> tuple[Tensor, HeadCache]:
        """One head forward: the output ``h`` fed back with the token drafted from it; the next
        output [1, H] and the cache grown by one position (the row's confirmed part left as is:
        the eager head's a new list, the compiled head's slots past the confirmed ones)."""
        hs, cache = self.run(row, h.unsqueeze(1), token.view(1, 1), cache)
        return hs[:, -1], cache


def stack_chains(chains: list[dict[str, Tensor] | None], vocab: int, device: Any) -> Draft:
    """Rows' chains as one right-padded Draft (a row without a chain drafts none this round)."""
    counts = [len(c["tokens"]) if c else 0 for c in chains]
    width = max(counts)
    sample = next((c for c in chains if c), None)
    hidden_size = sample["hidden"].shape[-1] if sample else 1
    dtype = sample["hidden"].dtype if sample else torch.float32
    tokens = torch.zeros(len(chains), width, dtype=torch.long, device=device)
    q = torch.zeros(len(chains), width, vocab, device=device)
    q_logits = torch.full((len(chains), width, vocab), OFF_VOCAB, device=device)
    hidden = torch.zeros(len(chains), width, hidden_size, dtype=dtype, device=device)
    for b, (chain, k) in enumerate(zip(chains, counts)):
        if chain:
            tokens[b, :k], q[b, :k], q_logits[b, :k], hidden[b, :k] = chain["tokens"], chain["q"], chain["q_logits"], chain["hidden"]
    return Draft(tokens=tokens, counts=counts, q=q, q_logits=q_logits, hidden=hidden)
