"""The interface between the decoding loop and a model: one step on a batch of rows, one cache."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bench.errors import BenchError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def to_device(values: list, device: torch.device) -> Tensor:
    """Host integers as a long tensor on ``device``, without a host sync. ``torch.tensor(values,
    device=cuda)`` copies from pageable memory, which waits for every kernel already queued on the
    stream; a copy from pinned memory is queued behind them instead (torch keeps the pinned block
    alive until the copy is done). So a round's only sync stays its verdicts."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=torch.long, device=device)
    return torch.tensor(values, dtype=torch.long, pin_memory=True).to(device, non_blocking=True)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of a model's parameters, a tied embedding counted once: what one step reads."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def open_engine(
    factory: Callable[..., ModelEngine], model: PreTrainedModel, widths: Sequence[int],
    trees: Sequence[int] = (), states: Sequence[int] = (),
) -> ModelEngine:  # fmt: skip
    """``factory``'s engine for ``model``: ``(model, widths)``, with the token-tree widths and the
    layer states to keep passed only when there are any (a factory that serves neither takes two
    arguments). An engine that does not keep the states asked for is refused in one line."""
    extra: dict[str, Sequence[int]] = {"states": tuple(states)} if states else {}
    made = factory(model, widths, trees, **extra) if trees else factory(model, widths, **extra)
    if made.states_at != tuple(states):
        raise BenchError(f"{type(made).__name__} does not return the target's layer states, which the drafter reads; use --engine eager")
    return made


class ModelEngine(ABC):
    """One model, its KV cache for a batch of rows, and each row's length (tokens held).

    ``start`` sizes the cache for a batch; ``step`` feeds tokens; ``truncate`` rolls rows back;
    ``select`` drops finished rows. Lengths are kept on the host: the loop decides them from the
    verdict it already synchronised, so an engine never needs a sync of its own.
    """

    model: PreTrainedModel  # the model it steps
    lengths: list[int]
    # The target's layer states a drafter reads (``Drafter.target_layers``): transformers'
    # ``hidden_states`` indices, fixed when the engine is made (``open_engine``: a compiled graph's
    # outputs are part of the graph), and their concatenation [B, T, len * H] at every token of
    # the last step (``step``, ``tree_step``, the prompt's), None until a step kept them.
    states_at: tuple[int, ...] = ()
    states: Tensor | None = None

    @abstractmethod
    def start(self, rows: int, max_len: int) -> None:
        """Empty cache for ``rows`` rows of at most ``max_len`` positions each."""

    @abstractmethod
    def step(self, ids: Tensor, real: Sequence[int], keep: int, hidden: bool) -> tuple[Tensor, Tensor | None]:
        """Feed ``ids`` [B, T]: row b's tokens go to positions lengths[b] .. lengths[b] + T - 1, and
        lengths[b] grows by ``real[b]`` (tokens past it are padding, overwritten later). Returns the
        logits of the last ``keep`` positions [B, keep, V] and, when ``hidden``, their last-layer
        hidden states."""

    def tree_step(self, ids: Tensor, parents: Tensor, real: Sequence[int]) -> Tensor:
        """Feed a token tree per row (``bench.engines.tree``): ``ids`` [B, n + 1] the row's last
        token (the root) then its nodes, ``parents`` [B, n] each node's parent (-1: the root). Token
        t goes to slot lengths[b] + t at position lengths[b] + its depth and sees the row's cache
        and its ancestors; lengths[b] grows by ``real[b]``. Returns the logits of every token
        [B, n + 1, V]. ``commit`` then keeps one path per row."""
        raise BenchError(f"{type(self).__name__} does not verify token trees; use --engine eager")

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        """After ``tree_step``: row b keeps its root and the nodes ``paths[b]`` (a root-to-node path,
        node indices), their K/V moved into the slots right after the root; the rest is rolled back."""
        raise BenchError(f"{type(self).__name__} does not verify token trees; use --engine eager")

    def truncate(self, keep: Sequence[int]) -> None:
        """Roll rows back: row b holds at most ``keep[b]`` tokens from now on."""
        self.lengths = [min(n, k) for n, k in zip(self.lengths, keep)]

    @abstractmethod
    def select(self, rows: Sequence[int]) -> None:
        """Keep only these rows, in this order (finished rows leave the batch)."""

    @property
    @abstractmethod
    def cache_bytes(self) -> int:
        """Bytes of the KV cache as allocated."""
