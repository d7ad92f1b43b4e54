"""EAGLE draft heads as plain torch modules, in the authors' published checkpoint layouts.

Read from the authors' code (SafeAILab/EAGLE, ``eagle/model/cnets.py`` for EAGLE-3, ``cnets1.py``
for EAGLE-1/2, ``ea_model.py`` and ``modeling_llama_kv.py`` for what they are fed) and checked
against vLLM's ``vllm/model_executor/models/llama_eagle3.py``:

- **EAGLE-3** (``cnets.py`` ``Model``): ``fc`` [3 * Ht -> H, no bias] fuses the target's hidden
  states entering layers 2, L // 2 and L - 3 (``modeling_llama_kv.py`` collects the input of those
  layers: ``transformers``' ``hidden_states[i]``, in that order); ``midlayer`` is one Llama
  decoder layer whose q/k/v read 2H = cat(input_layernorm(embed(token)), hidden_norm(h)), with
  the residual taken from h before its norm (vLLM's ``norm_before_residual`` config flag takes it
  after); ``norm`` then ``lm_head`` [H -> draft_vocab_size]; buffers ``d2t`` (draft id -> target
  id offset: target = d + d2t[d]) and ``t2d`` (which target ids the draft vocabulary holds).
  ``embed_tokens`` is the target's input embedding (``load_emb``) unless the checkpoint has one.
- **EAGLE-1/2** (``cnets1.py`` ``Model``): ``embed_tokens`` inside the checkpoint, ``fc`` [2H -> H,
  bias unless config ``bias: false``] over cat(embed(token), h), then ``num_hidden_layers`` Llama
  decoder layers, the first without ``input_layernorm``; no norm and no lm_head: the target's
  frozen ``lm_head`` reads the head's output (the target's last, post-norm, hidden state is h).

Both: a head position i reads (feature of target position i, token i + 1) and predicts token i + 2.
While drafting, the head's own output hidden state (before ``norm``) is fed back as the next
feature (EAGLE-3 then skips ``fc``: its input is already H wide, as ``cnets.py`` tests).

**Rope base.** The authors' ``LlamaAttention._init_rope`` builds the rotary embedding from the
HEAD's config (``EConfig.from_pretrained(ea_model_path)``): ``rope_theta`` when that config.json
has one, else 10000, over head_dim = hidden_size // num_attention_heads; the target's rope_theta is
never read. A rope_scaling other than none is refused here (the authors support only linear and
dynamic, and no published head we name uses either).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers.activations import ACT2FN

from bench.errors import BenchError

CacheKV = tuple[Tensor, Tensor]  # keys, values [B, kv_heads, T, head_dim]


@dataclass
class HeadConfig:
    """The fields of a head's config.json that its modules read (authors' ``EConfig`` names)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int | None = None
    num_hidden_layers: int = 1
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    hidden_act: str = "silu"
    draft_vocab_size: int | None = None
    target_hidden_size: int | None = None
    bias: bool = True  # EAGLE-1's fc bias (``ea_model.py`` reads config["bias"], default True)
    qkv_bias: bool = False
    norm_before_residual: bool = False  # vLLM's EAGLE-3 flag; the authors' heads leave it False
    head_dim: int | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> HeadConfig:
        known = {f.name for f in fields(cls)}
        try:
            config = cls(**{k: v for k, v in raw.items() if k in known and v is not None or k == "rope_scaling"})
        except TypeError:  # a nested layout (the speculators library's) lacks the top-level sizes
            need = ", ".join(f.name for f in fields(cls) if f.name not in raw and f.default is MISSING)
            raise BenchError(f"EAGLE head: config.json lacks {need}; not the authors' layout (docs/eagle.md)") from None
        if config.num_key_value_heads is None:
            config.num_key_value_heads = config.num_attention_heads
        if config.rope_scaling:
            raise BenchError(f"EAGLE head: rope_scaling {config.rope_scaling} is not supported; use a head whose config.json has none")
        if config.head_dim not in (None, config.hidden_size // config.num_attention_heads):
            raise BenchError("EAGLE head: head_dim differs from hidden_size // num_attention_heads, which the authors' layer uses")
        return config

    @property
    def dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class RMSNorm(nn.Module):
    """The authors' LlamaRMSNorm: the variance in fp32, the weight applied in the input dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(positions: Tensor, dim: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin [B, 1, T, dim] at ``positions`` [B, T], as the authors' LlamaRotaryEmbedding
    builds them (fp32 frequencies, cast to the activations' dtype)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=positions.device).float() / dim))
    freqs = positions.float().unsqueeze(-1) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class Attention(nn.Module):
    """The authors' LlamaAttention, reading ``width`` inputs (2H in EAGLE-3's midlayer)."""

    def __init__(self, config: HeadConfig, width: int, bias: bool) -> None:
        super().__init__()
        self.config, heads, kv = config, config.num_attention_heads, config.num_key_value_heads or 0
        self.q_proj = nn.Linear(width, heads * config.dim, bias=bias)
        self.k_proj = nn.Linear(width, kv * config.dim, bias=bias)
        self.v_proj = nn.Linear(width, kv * config.dim, bias=bias)
        self.o_proj = nn.Linear(heads * config.dim, config.hidden_size, bias=False)

    def forward(self, x: Tensor, positions: Tensor, mask: Tensor, cache: CacheKV | None) -> tuple[Tensor, CacheKV]:
        """``x`` [B, T, width] at ``positions`` [B, T]; ``mask`` additive [B, 1, T, past + T];
        ``cache`` the keys and values of the past. Returns the output and the extended cache."""
        c, (b, t, _) = self.config, x.shape
        q = self.q_proj(x).view(b, t, -1, c.dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, c.dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, c.dim).transpose(1, 2)
        cos, sin = rotary(positions, c.dim, c.rope_theta, x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        groups = q.shape[1] // k.shape[1]
        keys, values = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = q @ keys.transpose(2, 3) / math.sqrt(c.dim) + mask
        out = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ values
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), (k, v)


class MLP(nn.Module):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class Eagle3Layer(nn.Module):
    """``cnets.py`` LlamaDecoderLayeremb: attention over cat(norm(embed), norm(h)), residual h."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        # the authors' EAGLE-3 LlamaAttention has no biases whatever the config says (``qkv_bias``
        # is read by EAGLE-1 heads of Qwen targets only)
        self.self_attn = Attention(config, 2 * config.hidden_size, bias=False)
        self.mlp = MLP(config)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.before = config.norm_before_residual

    def forward(self, emb: Tensor, h: Tensor, positions: Tensor, mask: Tensor, cache: CacheKV | None) -> tuple[Tensor, CacheKV]:
        normed = self.hidden_norm(h)
        residual = normed if self.before else h
        x = torch.cat((self.input_layernorm(emb), normed), dim=-1)
        out, cache = self.self_attn(x, positions, mask, cache)
        h = residual + out
        return h + self.mlp(self.post_attention_layernorm(h)), cache


class Eagle1Layer(nn.Module):
    """``cnets1.py`` LlamaDecoderLayer: a Llama layer whose first copy has no input_layernorm.
    Also an EAGLE-3 head's layers after the midlayer (vLLM ``llama_eagle3.py``: layer i > 0 is a
    plain Llama layer over H, no biases)."""

    def __init__(self, config: HeadConfig, index: int, bias: bool | None = None) -> None:
        super().__init__()
        self.self_attn = Attention(config, config.hidden_size, bias=config.qkv_bias if bias is None else bias)
        self.mlp = MLP(config)
        if index:
            self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, h: Tensor, positions: Tensor, mask: Tensor, cache: CacheKV | None) -> tuple[Tensor, CacheKV]:
        x = self.input_layernorm(h) if hasattr(self, "input_layernorm") else h
        out, cache = self.self_attn(x, positions, mask, cache)
        h = h + out
        return h + self.mlp(self.post_attention_layernorm(h)), cache


def causal_mask(positions: Tensor, past: int, dtype: torch.dtype) -> Tensor:
    """Additive [B, 1, T, past + T]: every past slot, and the new ones up to the query's own."""
    t = positions.shape[1]
    allowed = torch.ones(t, past + t, dtype=torch.bool, device=positions.device).tril(past)
    low = torch.finfo(dtype).min
    return torch.zeros((), dtype=dtype, device=positions.device).where(allowed, low).expand(positions.shape[0], 1, t, past + t)


class EagleHead(nn.Module):
    """What both heads share: ``forward`` over (feature, next token) pairs with a KV cache per
    layer, ``logits`` over the draft vocabulary and ``to_target`` mapping it into the target's."""

    kind: str
    config: HeadConfig
    embed_tokens: nn.Embedding
    # EAGLE-3's reduced draft vocabulary (buffers); an EAGLE-1 head has none, so ``hasattr`` tells.
    d2t: Tensor
    t2d: Tensor

    def head_input(self, out: Tensor) -> Tensor:
        """What the draft logits are read from, of an output (a drafter's ``hidden``)."""
        raise NotImplementedError

    def logits(self, out: Tensor) -> Tensor:
        """Scores over the draft vocabulary [..., draft_vocab]."""
        raise NotImplementedError

    def target_layers(self, num_layers: int) -> tuple[int, ...]:
        """The target's ``hidden_states`` indices (transformers' ``output_hidden_states``) whose
        concatenation is the head's feature."""
        raise NotImplementedError

    def prepare(self, hidden: Tensor, tokens: Tensor, positions: Tensor | None, cache: list[CacheKV] | None, mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Embeddings, positions and mask of a forward (positions after the cache by default)."""
        past = cache[0][0].shape[2] if cache else 0
        if positions is None:
            positions = torch.arange(past, past + tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        emb = self.embed_tokens(tokens).to(hidden.dtype)
        return emb, positions, causal_mask(positions, past, hidden.dtype) if mask is None else mask

    @property
    def draft_vocab(self) -> int:
        return self.config.draft_vocab_size or self.config.vocab_size

    def to_target(self, ids: Tensor) -> Tensor:
        """Draft-vocabulary ids -> the target's ids."""
        return ids + self.d2t[ids] if hasattr(self, "d2t") else ids

    def target_probs(self, probs: Tensor) -> Tensor:
        """A law over the draft vocabulary [..., Vd] as a law over the target's [..., V]: each mass
        at its target id, zero on every id the draft vocabulary lacks."""
        if not hasattr(self, "d2t"):
            return probs
        ids = self.to_target(torch.arange(self.draft_vocab, device=probs.device)).expand_as(probs)
        return probs.new_zeros(*probs.shape[:-1], self.config.vocab_size).scatter_(-1, ids, probs)


class Eagle3Head(EagleHead):
    """EAGLE-3 (``cnets.py`` ``Model``): module names are the checkpoint's keys. The authors' head
    has one layer, the ``midlayer``; with ``num_hidden_layers`` n > 1 the layers 1..n-1 of vLLM's
    ``llama_eagle3.py`` follow it (plain Llama layers, checkpoint keys ``layers.i.*``; vLLM reads
    ``midlayer.*`` as ``layers.0``, so ``layers[0]`` here holds nothing)."""

    kind = "eagle3"

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        if not config.draft_vocab_size:
            raise BenchError("EAGLE-3 head: config.json lacks draft_vocab_size; is this an EAGLE-1 head?")
        self.config, h = config, config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h, config.pad_token_id)
        self.fc = nn.Linear(3 * (config.target_hidden_size or h), h, bias=False)
        self.midlayer = Eagle3Layer(config)
        if config.num_hidden_layers > 1:
            later = (Eagle1Layer(config, i, bias=False) for i in range(1, config.num_hidden_layers))
            self.layers = nn.ModuleList([nn.Identity(), *later])
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))

    def target_layers(self, num_layers: int) -> tuple[int, ...]:
        return (2, num_layers // 2, num_layers - 3)

    def forward(
        self,
        hidden: Tensor,
        tokens: Tensor,
        positions: Tensor | None = None,
        cache: list[CacheKV] | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, list[CacheKV]]:
        """``hidden`` [B, T, 3 Ht] the fused target states (or [B, T, H], the head's own output fed
        back), ``tokens`` [B, T] the next token at each; ``positions`` default after the cache,
        ``mask`` default causal. Returns the output hidden states (before ``norm``) and the cache."""
        emb, positions, mask = self.prepare(hidden, tokens, positions, cache, mask)
        if hidden.shape[-1] != emb.shape[-1]:
            hidden = self.fc(hidden)
        out, kv = self.midlayer(emb, hidden, positions, mask, cache[0] if cache else None)
        kvs = [kv]
        for i, layer in enumerate(self.later_layers(), start=1):
            out, kv = layer(out, positions, mask, cache[i] if cache else None)
            kvs.append(kv)
        return out, kvs

    def later_layers(self) -> list[Eagle1Layer]:
        """The layers after the midlayer (none in the authors' one-layer head)."""
        later = list(self.layers)[1:] if hasattr(self, "layers") else []
        return [layer for layer in later if isinstance(layer, Eagle1Layer)]  # all are: __init__ builds them

    def head_input(self, out: Tensor) -> Tensor:
        """What the lm_head reads of an output: its final norm (a drafter's ``hidden``)."""
        return self.norm(out)

    def logits(self, out: Tensor) -> Tensor:
        """Scores over the draft vocabulary [..., draft_vocab_size]."""
        return self.lm_head(self.norm(out))


class Eagle1Head(EagleHead):
    """EAGLE-1/2 (``cnets1.py`` ``Model``): the target's ``lm_head`` reads its output; it is held
    outside the module's parameters (``attach``), never saved with the head."""

    kind = "eagle1"

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config, h = config, config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, h, config.pad_token_id)
        self.fc = nn.Linear(2 * h, h, bias=config.bias)
        self.layers = nn.ModuleList(Eagle1Layer(config, i) for i in range(config.num_hidden_layers))
        self.target_head: list[nn.Module] = []  # a list: not a submodule

    def target_layers(self, num_layers: int) -> tuple[int, ...]:
        return (num_layers,)  # transformers' last hidden state is after the final norm: ``outputs[0]``

    def forward(
        self,
        hidden: Tensor,
        tokens: Tensor,
        positions: Tensor | None = None,
        cache: list[CacheKV] | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, list[CacheKV]]:
        """As ``Eagle3Head.forward`` with ``hidden`` [B, T, H] the target's last hidden state."""
        emb, positions, mask = self.prepare(hidden, tokens, positions, cache, mask)
        h, out = self.fc(torch.cat((emb, hidden), dim=-1)), []
        for i, layer in enumerate(self.layers):
            h, kv = layer(h, positions, mask, cache[i] if cache else None)
            out.append(kv)
        return h, out

    def head_input(self, out: Tensor) -> Tensor:
        return out  # the target's lm_head reads the output as is (``cnets1.py`` ``head(out_hidden)``)

    def logits(self, out: Tensor) -> Tensor:
        if not self.target_head:
            raise BenchError("EAGLE-1 head: no target lm_head attached; load it with load_eagle_head(path, target_model)")
        return self.target_head[0](out)


def resolve_head(source: str | Path) -> Path:
    """A local folder, or a Hugging Face repo id from the hub cache (``huggingface_hub``
    downloads it unless HF_HUB_OFFLINE=1, then only the cache answers)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if str(source).count("/") != 1 or path.exists():
        raise BenchError(f"EAGLE head {source}: not a folder with config.json nor a hub repo id (owner/name)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(source), allow_patterns=["config.json", "*.safetensors", "*.bin"]))
    except Exception as err:  # the hub's errors are many; the user needs one line
        raise BenchError(f"EAGLE head {source}: cannot download or find it in the hub cache ({type(err).__name__}); fetch it online once") from None


def read_state(folder: Path) -> dict[str, Tensor]:
    """The head's weights: model.safetensors, else pytorch_model.bin (``ea_model.py``'s order is
    the reverse; a folder holds one of them)."""
    if (folder / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").exists():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise BenchError(f"EAGLE head {folder}: no model.safetensors nor pytorch_model.bin")


def load_eagle_head(source: str | Path, target: Any) -> EagleHead:
    """The head at ``source`` (folder or repo id) for ``target`` (a transformers model, or only its
    config: then nothing of the target's weights is attached). EAGLE-3 when the weights have a
    ``midlayer``, EAGLE-1 when they have ``layers``; every checkpoint key must be a module's and
    every module's but the target's embedding (EAGLE-3) must be in the checkpoint."""
    folder = resolve_head(source)
    if not (folder / "config.json").exists():
        raise BenchError(f"EAGLE head {source}: no config.json")
    config = HeadConfig.from_dict(json.loads((folder / "config.json").read_text()))
    state = read_state(folder)
    head: EagleHead = Eagle3Head(config) if any(k.startswith("midlayer.") for k in state) else Eagle1Head(config)
    missing, unexpected = head.load_state_dict(state, strict=False)
    # The target's embedding is the head's unless saved (EAGLE-3 always; EAGLE-1 as the authors'
    # cnets.py ``load_emb`` falls back to it); a full-vocabulary head drops d2t/t2d (ea_model.py).
    same_vocab = head.config.draft_vocab_size in (None, head.config.vocab_size)
    optional = {"embed_tokens.weight"} | ({"d2t", "t2d"} if same_vocab else set())
    missing = [k for k in missing if k not in optional]
    if missing or unexpected:
        raise BenchError(f"EAGLE head {source}: keys not in the {head.kind} layout: missing {missing[:4]}, unexpected {unexpected[:4]}")
    # Cast to the checkpoint's dtype before the target's embedding is attached: the embedding keeps
    # the target's precision (the authors load it ``.float()`` and cast the layer to the target's
    # dtype, ea_model.py ``self.ea_layer.to(self.base_model.dtype)``), never rounded through fp16.
    head = head.to(next(v.dtype for k, v in state.items() if v.is_floating_point()))
    check_target(head, target, "embed_tokens.weight" in state)
    return head


def check_target(head: EagleHead, target: Any, own_embedding: bool) -> None:
    """Refuse a head built for another target; attach the target's frozen weights it reads."""
    config = getattr(target, "config", target)
    if config.vocab_size != head.config.vocab_size:
        raise BenchError(f"EAGLE head: vocabulary {head.config.vocab_size} != the target's {config.vocab_size}; use a head trained for this target")
    width = head.config.target_hidden_size or head.config.hidden_size
    if config.hidden_size != width:
        raise BenchError(f"EAGLE head: reads target states of width {width}, the target's are {config.hidden_size}")
    if not hasattr(target, "get_input_embeddings"):
        return
    if not own_embedding:
        head.embed_tokens.weight.data = target.get_input_embeddings().weight.detach().clone()
    if isinstance(head, Eagle1Head):
        head.target_head[:] = [target.get_output_embeddings()]
