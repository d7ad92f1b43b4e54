"""The reference engine: one eager transformers forward per step over a position-slotted KV cache."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from bench.engines.base import ModelEngine, to_device
from bench.engines.layout import FULL, SLIDING, attention_layout, layer_devices
from bench.engines.tree import ancestors, tree_allowed


class SlotCache:
    """Per-layer K/V buffers [B, kv_heads, max_len, head_dim]; row b's token at position t sits in
    slot t. Allocated at the first write of each layer, from the layer's keys: so on the layer's own
    device when a ``device_map`` spreads the model, and every index into a buffer is taken on that
    buffer's device (``place`` copies a step's positions to each device once, not once per layer).

    transformers' attention layers call only ``update`` when the forward is given position ids and
    a dict of ready masks, which ``EagerEngine.step`` always passes (transformers' device-map hooks
    move the masks and position ids to each layer's device)."""

    def __init__(self, rows: int, max_len: int, devices: Iterable[torch.device] = ()) -> None:
        self.rows, self.max_len = rows, max_len
        self.devices = tuple(dict.fromkeys(devices))
        self.keys: dict[int, Tensor] = {}
        self.values: dict[int, Tensor] = {}
        self.positions: dict[torch.device, Tensor] = {}
        self.visible = 0  # slots the current step's attention reads: max position + 1

    def place(self, positions: Tensor) -> None:
        """This step's positions [B, T], on every device a layer of the model lives on."""
        here = {positions.device: positions}
        self.positions = here | {d: positions.to(d, non_blocking=True) for d in self.devices if d not in here}

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args: object, **kwargs: object):
        if layer_idx not in self.keys:
            shape = (self.rows, key.shape[1], self.max_len, key.shape[3])
            self.keys[layer_idx] = key.new_zeros(shape)
            self.values[layer_idx] = value.new_zeros(shape)
        rows = torch.arange(self.rows, device=key.device).unsqueeze(1)
        positions = self.positions[key.device]
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[rows, :, positions] = key.transpose(1, 2)
        v[rows, :, positions] = value.transpose(1, 2)
        return k[:, :, : self.visible], v[:, :, : self.visible]

    def move(self, rows: Sequence[int], source: Sequence[int], target: Sequence[int]) -> None:
        """Copy row rows[i]'s K/V from slot source[i] to slot target[i] in every layer (a tree's
        accepted path into the contiguous slots after the root; every source at or past every
        target, so reading all before writing any is the same as copying in order)."""
        index = [list(rows), list(source), list(target)]
        on: dict[torch.device, Tensor] = {}  # the indices copied once per device
        for store in (self.keys, self.values):
            for buf in store.values():
                r, s, t = on.setdefault(buf.device, to_device(index, buf.device))
                buf[r, :, t] = buf[r, :, s]

    def select(self, rows: Tensor) -> None:
        for store in (self.keys, self.values):
            for layer, buf in store.items():
                store[layer] = buf.index_select(0, rows.to(buf.device))
        self.rows = len(rows)

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for s in (self.keys, self.values) for b in s.values())


class EagerEngine(ModelEngine):
    """A transformers causal LM run eagerly, with explicit per-row position ids and 4-D masks that
    are causal by position (and windowed on sliding layers), so padding and rejected slots are
    never visible to a real query."""

    def __init__(
        self, model: PreTrainedModel, widths: Sequence[int] = (), trees: Sequence[int] = (), states: Sequence[int] = ()
    ) -> None:
        """``widths``, ``trees``: the step and tree widths the loop will use; eager runs any width,
        so it needs none. ``states``: the layer states every step keeps (``ModelEngine.states_at``)."""
        layout = attention_layout(model)
        self.model = model
        self.states_at = tuple(states)
        self.kinds = set(layout.kinds)
        self.window = layout.window
        self.devices = tuple(dict.fromkeys(layer_devices(model).values())) or (model.device,)
        self.lengths: list[int] = []
        self.tree_start: list[int] = []  # each row's length before the last tree step
        self.cache = SlotCache(0, 0)

    def start(self, rows: int, max_len: int) -> None:
        self.cache = SlotCache(rows, max_len, self.devices)
        self.lengths = [0] * rows

    def _masks(self, positions: Tensor, visible: int) -> Tensor | dict[str, Tensor]:
        """Additive [B, 1, T, visible] masks: one tensor when every layer attends fully (every
        transformers model passes a 4-D mask through as is), else one per layer type (models with
        sliding layers take the dict)."""
        slot = torch.arange(visible, device=positions.device)
        query = positions.unsqueeze(-1)  # [B, T, 1]
        allowed = {FULL: slot <= query}
        if SLIDING in self.kinds:
            assert self.window is not None  # attention_layout gives a model with sliding layers its window
            allowed[SLIDING] = allowed[FULL] & (slot > query - self.window)
        return self._additive(allowed)

    def _additive(self, allowed: dict[str, Tensor]) -> Tensor | dict[str, Tensor]:
        """0 where allowed, the dtype's lowest value elsewhere, [B, 1, T, visible] per layer type."""
        low = torch.finfo(self.model.dtype).min
        zero = torch.zeros((), dtype=self.model.dtype, device=next(iter(allowed.values())).device)
        masks = {k: torch.where(a, zero, low).unsqueeze(1) for k, a in allowed.items() if k in self.kinds}
        return masks if len(masks) > 1 else next(iter(masks.values()))

    def step(self, ids: Tensor, real: Sequence[int], keep: int, hidden: bool) -> tuple[Tensor, Tensor | None]:
        width = ids.shape[1]
        if self.lengths == [0] and list(real) == [width] and self.kinds == {FULL}:
            return self._prompt(ids, keep, hidden)
        start = to_device(self.lengths, ids.device)
        positions = start.unsqueeze(1) + torch.arange(width, device=ids.device)
        self.cache.visible = max(self.lengths) + width
        if self.cache.visible > self.cache.max_len:
            raise RuntimeError(f"cache overflow: {self.cache.visible} > {self.cache.max_len} slots")
        logits, last, self.states = self._forward_at(ids, positions, self.cache.visible, keep, hidden)
        self.lengths = [n + r for n, r in zip(self.lengths, real)]
        return logits, last

    def _prompt(self, ids: Tensor, keep: int, hidden: bool) -> tuple[Tensor, Tensor | None]:
        """A lone row's prompt from position 0 is plain causal attention: transformers' own forward
        (its cache, its masks) runs it, as its ``generate`` does, and its K/V go into the slots. With
        no mask to read, SDPA takes ``is_causal`` and skips the masked half of the scores: a long
        prompt's prefill is the one step where that counts (SmolLM2, 650 tokens, bf16: 637 ms with
        the 4-D mask, against 562 ms for transformers' own forward)."""
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=keep, output_hidden_states=hidden or bool(self.states_at))
        self.states = self._states(out.hidden_states)
        width = ids.shape[1]
        self.cache.place(torch.arange(width, device=ids.device).unsqueeze(0))
        self.cache.visible = width
        for layer_idx, layer in enumerate(out.cache.layers):
            self.cache.update(layer.keys, layer.values, layer_idx)
        self.lengths = [width]
        return out.logits, out.hidden_states[-1][:, -keep:] if hidden else None

    def _forward_at(
        self, ids: Tensor, positions: Tensor, visible: int, keep: int, hidden: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """The transformers forward of every engine: ``ids`` at explicit ``positions``, attending
        to ``visible`` cache slots under ready masks. Logits (and last hidden states) of the last
        ``keep`` positions, and the layer states at ``states_at`` of every position (None when it
        keeps none): returned, not stored, so a compiled graph has them as outputs."""
        self.cache.place(positions)
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=self._masks(positions, visible),
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=hidden or bool(self.states_at),
        )
        last = out.hidden_states[-1][:, -keep:] if hidden else None
        return out.logits, last, self._states(out.hidden_states)

    def tree_step(self, ids: Tensor, parents: Tensor, real: Sequence[int]) -> Tensor:
        return self.tree_states(ids, parents, real)[0]

    def tree_states(self, ids: Tensor, parents: Tensor, real: Sequence[int], hidden: bool = False) -> tuple[Tensor, Tensor | None]:
        """``tree_step``, also returning every token's last-layer hidden state when ``hidden`` (what
        a judge's features read when training, bench.learned.shared)."""
        start = to_device(self.lengths, ids.device)
        self.cache.visible = max(self.lengths) + ids.shape[1]
        if self.cache.visible > self.cache.max_len:
            raise RuntimeError(f"cache overflow: {self.cache.visible} > {self.cache.max_len} slots")
        logits, last, self.states = self._tree_forward_at(ids, start, parents, self.cache.visible, hidden)
        self.tree_start = list(self.lengths)
        self.lengths = [n + r for n, r in zip(self.lengths, real)]
        return logits, last

    def _tree_forward_at(
        self, ids: Tensor, start: Tensor, parents: Tensor, visible: int, hidden: bool = False
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Logits [B, n + 1, V] (and hidden states, and the states at ``states_at``) of a tree per
        row (bench.engines.tree): tokens
        in slots start + t, at positions start + depth, each seeing the cache and its ancestors
        (and, on sliding layers, only keys less than ``window`` positions back, as ``_masks``)."""
        allowed, positions, keys = tree_allowed(start, ancestors(parents), visible)
        kinds = {FULL: allowed}
        if SLIDING in self.kinds:
            assert self.window is not None  # as in _masks
            kinds[SLIDING] = allowed & (keys.unsqueeze(1) > positions.unsqueeze(-1) - self.window)
        self.cache.place(start.unsqueeze(1) + torch.arange(ids.shape[1], device=ids.device))
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=self._additive(kinds),
            cache=self.cache,
            use_cache=True,
            logits_to_keep=ids.shape[1],
            output_hidden_states=hidden or bool(self.states_at),
        )
        return out.logits, out.hidden_states[-1] if hidden else None, self._states(out.hidden_states)

    def _states(self, hidden_states: tuple[Tensor, ...] | None) -> Tensor | None:
        """The step's states at ``states_at`` (transformers' ``hidden_states``: the embeddings,
        then each layer's output, the last after the final norm), concatenated in that order."""
        if not self.states_at or hidden_states is None:
            return None
        device = hidden_states[self.states_at[0]].device  # layers spread over GPUs meet on one
        return torch.cat([hidden_states[i].to(device) for i in self.states_at], dim=-1)

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        moves = [
            (b, start + 1 + j, start + 1 + i)
            for b, (path, start) in enumerate(zip(paths, self.tree_start))
            for i, j in enumerate(path)
            if j != i
        ]
        if moves:
            self.cache.move(*zip(*moves))
        self.lengths = [start + 1 + len(path) for path, start in zip(paths, self.tree_start)]

    def select(self, rows: Sequence[int]) -> None:
        self.cache.select(to_device(list(rows), self.model.device))
        self.lengths = [self.lengths[i] for i in rows]

    @property
    def cache_bytes(self) -> int:
        return self.cache.nbytes
