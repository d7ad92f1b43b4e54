"""An early-exit draft for a target that has no smaller sibling sharing its tokenizer.

The draft is the target's first ``k`` layers (shared, not copied: no extra memory) and an output
layer made from the target's own: ``logits = W_E M u``, where ``u = h_k / rms(h_k)`` is layer k's
residual state under a unit-weight RMSNorm, ``W_E`` the target's (tied) output embedding and ``M``
a fitted 576 x 576 map from layer k's normalised state to the target's final normalised state
(``scripts/make_smollm2_draft.py`` fits it and says how). ``M`` is folded into the draft's
``lm_head`` as ``W_E M`` once, at load: the draft is then a plain ``LlamaForCausalLM`` of k layers
that every engine, ``generate`` and assisted generation run unchanged, and it computes exactly the
fitted function (a product regrouped, nothing approximated). Only ``M`` ships (1.3 MB).

Sharing layers has one visible effect: transformers installs its output-capturing hooks per model
at the first forward, so once both models have run with ``output_hidden_states`` a shared layer's
output is listed once per model. ``hidden_states[-1]`` (what the engines and the DIVERSED head read)
stays each model's own final state; intermediate indices shift, so read a layer with a hook.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from bench.atomic import write_atomic
from bench.errors import BenchError

MAP_FILE, CARD_FILE = "correction.safetensors", "card.json"


def build_early_exit_draft(target: PreTrainedModel, layers: int, mapping: Tensor) -> PreTrainedModel:
    """A ``layers``-layer model of the target's class sharing its embeddings, rotary table and
    first layers, with a unit-weight final norm and ``lm_head = W_E @ mapping`` (computed in fp32,
    stored in the target's dtype)."""
    decoder = target.get_decoder()
    width = target.config.hidden_size
    if not 1 <= layers < target.config.num_hidden_layers:
        raise BenchError(f"early-exit draft: layers must be in 1..{target.config.num_hidden_layers - 1}")
    if tuple(mapping.shape) != (width, width):
        raise BenchError(f"early-exit draft: the map is {tuple(mapping.shape)}, the target is {width} wide")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    config.tie_word_embeddings = False
    config._name_or_path = f"{target.config._name_or_path} early exit after layer {layers}"
    with torch.device("meta"):  # every module is replaced below: allocate nothing
        draft = type(target)(config)
    device, dtype = target.device, target.dtype
    inner = draft.get_decoder()
    inner.embed_tokens = decoder.embed_tokens
    inner.rotary_emb = decoder.rotary_emb
    inner.layers = nn.ModuleList(decoder.layers[:layers])
    norm = copy.deepcopy(decoder.norm)
    with torch.no_grad():
        norm.weight.fill_(1.0)
        head = target.get_output_embeddings().weight.float() @ mapping.to(device, torch.float32)
    inner.norm = norm
    draft.lm_head = nn.Linear(width, head.shape[0], bias=False, device=device, dtype=dtype)
    with torch.no_grad():
        draft.lm_head.weight.copy_(head)
    draft.generation_config = copy.deepcopy(target.generation_config)
    left = [name for name, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left:
        raise BenchError(f"early-exit draft: {left[:3]} were not built ({type(target).__name__} differs)")
    return draft.eval()


def read_correction(folder: Path) -> tuple[dict[str, Any], Tensor]:
    """The card and the map of a correction folder."""
    from safetensors.torch import load_file

    try:
        card = json.loads((folder / CARD_FILE).read_text())
        mapping = load_file(str(folder / MAP_FILE))["map"]
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(f"early-exit draft: cannot read {folder} ({exc}); reinstall the package") from None
    return card, mapping


def save_correction(folder: Path, mapping: Tensor, card: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {"map": mapping.detach().float().cpu().contiguous()}
    write_atomic(folder / MAP_FILE, lambda tmp: save_file(tensors, str(tmp)))
    text = json.dumps(card, indent=2, sort_keys=True) + "\n"
    write_atomic(folder / CARD_FILE, lambda tmp: tmp.write_text(text))


def load_early_exit_draft(
    target: PreTrainedModel, relative: str, target_sha256: str, pair: str
) -> PreTrainedModel:
    """The draft of a fetched pair, from its correction folder (relative to ``bench/``). The card
    names the model file the map was fitted for: a map fitted for other weights is refused."""
    folder = Path(str(resources.files("bench") / relative))
    card, mapping = read_correction(folder)
    if card.get("target_sha256") != target_sha256:
        raise BenchError(
            f"pair {pair}: the draft correction in {folder} was fitted for another target "
            f"(sha256 {card.get('target_sha256')}); refit it with scripts/make_smollm2_draft.py"
        )
    return build_early_exit_draft(target, int(card["layers"]), mapping)
