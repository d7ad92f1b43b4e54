"""SuffixDecoding (Oliaro et al., arXiv 2411.04975): drafts from suffix trees, no model; vLLM's
``suffix`` speculative method. Ported from the authors' code, snowflakedb/ArcticInference:
``csrc/suffix_decoding/suffix_tree.cc`` (the tree, its counts and sibling order, ``speculate``,
``_speculate_path``, ``_speculate_tree``) and ``arctic_inference/suffix_decoding/cache.py``
(``SuffixDecodingCache``: a per-request tree, a global tree of responses, FIFO eviction), driven
as vLLM's ``vllm/v1/spec_decode/suffix_decoding.py`` drives it.

A suffix tree of depth D holds every window of at most D tokens of its sequences; a node's count
is how many suffixes (start positions) pass through or end at it. Each round the row's last D
tokens are the context: for every match length m = 1, 2, ... (while the last m tokens occur in
the tree) the continuation is expanded from the matched node, each child with probability
count(child) / count(node) times its parent's, never below ``min_token_prob``, at most
min(N, floor(max_spec_factor * m + max_spec_offset)) tokens: ``mode=chain`` follows the most
frequent child, ``mode=tree`` takes the most probable frontier node next (a best-first token
tree). A draft's score is the sum of its tokens' probabilities; the best-scoring match length wins
(ties: the longer), and the per-request tree's draft beats the global tree's unless the global
one scores higher.

The per-request tree holds the row's prompt and output; the global tree holds responses (output
tokens only) of the examples this drafter decoded before and during this one, up to
``max_cached_requests`` of them (the oldest evicted first; 0: no global tree, -1: no limit). A
request is its prompt: decoding the same prompt again (the timing pass's warm-up, then the
example) first evicts its earlier response, as the source does when a request id recurs.

The port stores the tree uncompressed (a node per token; the source compresses paths, which
changes memory, not counts, order or drafts) and emulates the source's tie orders: siblings of
equal count in the order its linked lists keep them, and ``mode=tree``'s frontier as libstdc++'s
``std::priority_queue`` pops it. Probabilities are float32, as there.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from bench.drafters.base import Draft, DraftContext, Drafter, DraftRow, packed
from bench.errors import BenchError

F32 = np.float32
MODES = ("chain", "tree")


class Node:
    """A token of the tree: ``count`` suffixes pass through or end here; ``order`` its children
    most frequent first, as suffix_tree.cc's sibling list keeps them (the root's is never read)."""

    __slots__ = ("token", "count", "parent", "children", "order")

    def __init__(self, token: int, parent: Node | None) -> None:
        self.token, self.count, self.parent = token, 0, parent
        self.children: dict[int, Node] = {}
        self.order: list[Node] = []

    def only_child(self) -> Node | None:
        """The next token inside one of the source's compressed nodes: the sole child, passed by
        every suffix through this node (None at a branch, a leaf or where a suffix ends)."""
        if len(self.children) == 1 and self.parent is not None:
            child = self.order[0]
            return child if child.count == self.count else None
        return None


def _increment(node: Node) -> None:
    """``_increment_count``: +1, moved before the head of its previous sibling's group of equal
    counts when it overtakes or joins it."""
    parent = node.parent
    assert parent is not None
    if parent.parent is None:  # a child of the root: the root's order is never read
        node.count += 1
        return
    siblings = parent.order
    i = siblings.index(node)
    if i == 0 or siblings[i - 1].count > node.count + 1:
        node.count += 1
        return
    j, count = i - 1, siblings[i - 1].count
    while j > 0 and siblings[j - 1].count == count:
        j -= 1
    del siblings[i]
    siblings.insert(j, node)
    node.count += 1


def _decrement(node: Node) -> None:
    """``_decrement_count``: -1, moved to the head of the next group when siblings of its count
    follow it."""
    parent = node.parent
    assert parent is not None
    if parent.parent is None:
        node.count -= 1
        return
    siblings = parent.order
    i = siblings.index(node)
    if i + 1 == len(siblings) or siblings[i + 1].count < node.count:
        node.count -= 1
        return
    j = i + 1
    while j < len(siblings) and siblings[j].count == node.count:
        j += 1
    del siblings[i]
    siblings.insert(j - 1, node)
    node.count -= 1


@dataclass
class Speculation:
    """suffix_tree.h's ``Draft``: tokens, each one's parent (-1: the context's last token), its
    estimated probability, their sum (the score) and the context match length that gave them."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: np.float32 = F32(0.0)
    match_len: int = 0

    def add(self, token: int, parent: int, prob: np.float32) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.probs.append(float(prob))
        self.score = F32(self.score + prob)
        return len(self.tokens) - 1


class SuffixTree:
    """suffix_tree.cc's ``SuffixTree``: sequences by id, every suffix of each up to ``max_depth``
    tokens counted."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = Node(-1, None)
        self.seqs: dict[int, list[int]] = {}
        self.active: dict[int, list[Node]] = {}  # per sequence, where its last max_depth suffixes end

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(seq_id, int(token))

    def append(self, seq_id: int, token: int) -> None:
        """A token at the end of sequence ``seq_id``: a new suffix starts, each active one
        extends by the token (a new child, count 1, last among its siblings; or +1)."""
        seq, active = self.seqs.setdefault(seq_id, []), self.active.setdefault(seq_id, [])
        active.append(self.root)
        self.root.count += 1
        if len(active) > self.max_depth:
            del active[0]
        seq.append(token)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = Node(token, node)
                child.count = 1
                node.order.append(child)
            else:
                _increment(child)
            active[i] = child

    def remove(self, seq_id: int) -> None:
        """``remove``: every suffix of the sequence uncounted, nodes left with none dropped."""
        seq = self.seqs.pop(seq_id)
        del self.active[seq_id]
        for start in range(len(seq)):
            node = self.root
            node.count -= 1
            for token in seq[start : start + self.max_depth]:
                child = node.children[token]
                if child.count == 1:  # only this suffix passed: drop the child and its subtree
                    del node.children[token]
                    node.order.remove(child)
                    break
                _decrement(child)
                node = child

    def match(self, context: Sequence[int]) -> Node | None:
        """``_match_context``: the node the tokens lead to from the root, None if they do not occur."""
        node = self.root
        for token in context:
            child = node.children.get(token)
            if child is None:
                return None
            node = child
        return node

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        use_tree_spec: bool,
    ) -> Speculation:
        """``speculate``: the best-scoring draft over match lengths 1 .. len(context) - 1 (the
        source's bound), a longer match winning ties."""
        best, min_prob = Speculation(), F32(min_token_prob)
        for match_len in range(1, len(context)):
            node = self.match(context[len(context) - match_len :])
            if node is None:
                break
            spec_len = int(float(F32(match_len * F32(max_spec_factor)) + F32(max_spec_offset)) + 1e-6)
            most = max(min(max_spec_tokens, spec_len), 0)
            draft = (self._tree if use_tree_spec else self._path)(node, most, min_prob)
            if draft.score >= best.score:
                best, draft.match_len = draft, match_len
        return best

    @staticmethod
    def _path(node: Node, most: int, min_prob: np.float32) -> Speculation:
        """``_speculate_path``: the most frequent child, step by step."""
        out, prob = Speculation(), F32(1.0)
        while len(out.tokens) < most and node.order:
            child = node.order[0]
            prob = F32(prob * (F32(child.count) / F32(node.count)))
            if prob < min_prob:
                break
            out.add(child.token, len(out.tokens) - 1, prob)
            node = child
        return out

    @staticmethod
    def _tree(node: Node, most: int, min_prob: np.float32) -> Speculation:
        """``_speculate_tree``: the most probable frontier token next. An item either emits a
        node's token or expands a node into its children, as the source's items (a compressed
        node and an index into it) do, popped in std::priority_queue's order."""
        out, heap = Speculation(), _Heap()
        inside = node.only_child()
        heap.push((F32(1.0), inside or node, inside is not None, -1))
        while len(out.tokens) < most and heap:
            prob, at, emit, parent = heap.pop()
            if emit:
                index = out.add(at.token, parent, prob)
                inside = at.only_child()
                heap.push((prob, inside or at, inside is not None, index))
                continue
            for child in at.order:
                p = F32(F32(prob * F32(child.count)) / F32(at.count))
                if p < min_prob:
                    break
                heap.push((p, child, True, parent))
        return out


class _Heap:
    """libstdc++'s ``std::priority_queue`` (``push_heap``, ``pop_heap`` by ``__adjust_heap``) on
    items ordered by their first field, so that equal probabilities pop in the source's order."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def __len__(self) -> int:
        return len(self.items)

    def push(self, item: tuple) -> None:
        self.items.append(item)
        self._up(len(self.items) - 1, item)

    def _up(self, hole: int, item: tuple) -> None:
        a = self.items
        parent = (hole - 1) // 2
        while hole > 0 and a[parent][0] < item[0]:
            a[hole], hole = a[parent], parent
            parent = (hole - 1) // 2
        a[hole] = item

    def pop(self) -> tuple:
        a = self.items
        top, last = a[0], a.pop()
        n = len(a)
        if not n:
            return top
        hole = second = 0
        while second < (n - 1) // 2:
            second = 2 * (second + 1)
            if a[second][0] < a[second - 1][0]:
                second -= 1
            a[hole], hole = a[second], second
        if n % 2 == 0 and second == (n - 2) // 2:
            second = 2 * (second + 1)
            a[hole], hole = a[second - 1], second - 1
        self._up(hole, last)
        return top


class SuffixCache:
    """cache.py's ``SuffixDecodingCache``: a tree per active request over its prompt and
    response, and one global tree over responses, at most ``max_cached_requests`` of them (the
    oldest evicted first; 0: none, negative: no limit)."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int) -> None:
        self.max_tree_depth, self.max_cached_requests = max_tree_depth, max_cached_requests
        self.global_tree = SuffixTree(max_tree_depth)
        self.local: dict[Hashable, SuffixTree] = {}
        self.seq_ids: dict[Hashable, int] = {}  # request -> its response's id in the global tree
        self.next_id = 0

    def start_request(self, req: Hashable, prompt: Sequence[int]) -> None:
        if req in self.local:
            raise BenchError(f"suffix: request {req!r} is already active")
        self.local[req] = SuffixTree(self.max_tree_depth)
        self.local[req].extend(0, prompt)
        if self.max_cached_requests != 0:
            if req in self.seq_ids:  # a request seen again: its earlier response goes
                self.evict(req)
            self.seq_ids[req], self.next_id = self.next_id, self.next_id + 1
            while 0 <= self.max_cached_requests < len(self.seq_ids):  # FIFO, never the new one
                self.evict(next(iter(self.seq_ids)))

    def stop_request(self, req: Hashable) -> None:
        del self.local[req]

    def add_active_response(self, req: Hashable, tokens: Sequence[int]) -> None:
        self.local[req].extend(0, tokens)
        if req in self.seq_ids:
            self.global_tree.extend(self.seq_ids[req], tokens)

    def evict(self, req: Hashable) -> None:
        seq_id = self.seq_ids.pop(req)
        if seq_id in self.global_tree.seqs:
            self.global_tree.remove(seq_id)

    def speculate(
        self, req: Hashable, context: Sequence[int], max_spec_tokens: int, factor: float, offset: float,
        min_token_prob: float, use_tree_spec: bool,
    ) -> Speculation:  # fmt: skip
        """The per-request tree's draft unless the global tree's scores higher."""
        context = context[-self.max_tree_depth :]
        args = (context, max_spec_tokens, factor, offset, min_token_prob, use_tree_spec)
        mine, theirs = self.local[req].speculate(*args), self.global_tree.speculate(*args)
        return mine if mine.score >= theirs.score else theirs


@dataclass
class SuffixDecoding(Drafter):
    """Drafts by SuffixDecoding; deterministic, so each node's law is the point mass on its token.
    N (--draft-len) is vLLM's ``num_speculative_tokens``: the most tokens (nodes) a round drafts."""

    name: ClassVar[str] = "suffix"
    help: ClassVar[str] = (
        "SuffixDecoding (vLLM's suffix), no model: max_cached_requests is the global tree's (0: none, -1: no limit), "
        "mode=chain|tree; N = --draft-len (tokens per round)"
    )
    supplies: ClassVar[frozenset[str]] = frozenset({"q"})
    deterministic: ClassVar[bool] = True
    max_tree_depth: int = 24  # vLLM's suffix_decoding_max_tree_depth
    max_spec_factor: float = 1.0  # suffix_decoding_max_spec_factor
    max_spec_offset: float = 0.0  # cache.speculate's max_spec_offset (vLLM leaves it 0)
    min_token_prob: float = 0.1  # suffix_decoding_min_token_prob
    max_cached_requests: int = 10000  # suffix_decoding_max_cached_requests
    mode: str = "chain"  # chain: vLLM's (use_tree_spec False); tree: the source's token tree

    def __post_init__(self) -> None:
        def whole(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        if not whole(self.max_tree_depth) or self.max_tree_depth < 2:
            raise BenchError(f"suffix: max_tree_depth must be an integer >= 2, got {self.max_tree_depth!r}")
        if not whole(self.max_cached_requests) or self.max_cached_requests < -1:
            raise BenchError(
                f"suffix: max_cached_requests must be an integer >= 0 (0: no global tree) or -1 (no limit), "
                f"got {self.max_cached_requests!r}"
            )
        for key in ("max_spec_factor", "max_spec_offset", "min_token_prob"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise BenchError(f"suffix: {key} must be a number, got {value!r}")
        if self.max_spec_factor < 0:
            raise BenchError(f"suffix: max_spec_factor must be >= 0, got {self.max_spec_factor!r}")
        if not 0 <= self.min_token_prob <= 1:
            raise BenchError(f"suffix: min_token_prob must be in [0, 1], got {self.min_token_prob!r}")
        if self.mode not in MODES:
            raise BenchError(f"suffix: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.device = torch.device("cpu")
        self.cache = SuffixCache(self.max_tree_depth, self.max_cached_requests)
        self.requests: dict[int, Hashable] = {}  # row index -> its request
        self.fed: dict[int, int] = {}  # row index -> tokens of its seq in its trees

    def bind(self, ctx: DraftContext) -> SuffixDecoding:
        """Where its tokens go (EOS and N are the loop's: a draft is not cut at an EOS, as in the
        source, and N comes with each round's caps)."""
        self.device = ctx.device
        return self

    def target_widths(self, cap: int) -> tuple[int, ...]:
        """A round where nothing matched is a width-1 step; others at most N + 1 wide."""
        return (1, cap + 1)

    def tree_widths(self, cap: int) -> tuple[int, ...]:
        """In tree mode, trees of at most N nodes: one width, N + 1 with the root."""
        return (cap + 1,) if self.mode == "tree" else ()

    def start(self, rows: int, max_len: int) -> None:
        """A new batch: the last batch's requests stop (a finished row stopped already)."""
        for req in self.requests.values():
            self.cache.stop_request(req)
        self.requests, self.fed = {}, {}

    def _follow(self, row: DraftRow) -> Hashable:
        """The row's request, started on first sight (its prompt), its new tokens added."""
        if row.index not in self.requests:
            prompt = row.seq[: len(row.seq) - len(row.out)]
            req: Hashable = tuple(prompt)
            if req in self.cache.local:  # the same prompt twice in one batch
                req = (req, row.index)
            self.cache.start_request(req, prompt)
            self.requests[row.index], self.fed[row.index] = req, len(prompt)
        req = self.requests[row.index]
        self.cache.add_active_response(req, row.seq[self.fed[row.index] :])
        self.fed[row.index] = len(row.seq)
        return req

    def draft(self, rows: Sequence[DraftRow], caps: Sequence[int]) -> Draft:
        """Each row's speculation of at most its cap tokens (rows fed and drafted in batch order,
        as vLLM's proposer loops over its requests)."""
        found = []
        for row, cap in zip(rows, caps):
            req = self._follow(row)
            spec = (
                self.cache.speculate(
                    req, row.seq, cap, self.max_spec_factor, self.max_spec_offset, self.min_token_prob,
                    self.mode == "tree",
                )  # fmt: skip
                if cap
                else Speculation()
            )
            found.append((spec.tokens, spec.parents))
        return packed(found, self.device)

    def finish(self, row: DraftRow) -> None:
        """The response's last tokens join the global tree; the request stops."""
        self.cache.stop_request(self._follow(row))
        del self.requests[row.index], self.fed[row.index]
