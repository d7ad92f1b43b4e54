"""Model pairs: a YAML file per draft/target pair (``pairs/``), and the code that loads one.

A pair is named by its registry name (``tiny``, ``llama3``, ``qwen3``, ``gemma3``, ``smollm2``, ...)
or by a path to a user's own YAML file with the same fields.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationMixin, PreTrainedModel, PreTrainedTokenizerBase

from bench.engines.layout import attention_layout
from bench.errors import BenchError
from bench.fetch import FetchSource, fetched_model
from bench.registry import entries, find, load_yaml
from bench.tiny import TinyConfig, build_synthetic_pair, build_tiny_pair

PAIR_KINDS = ("tiny", "hub", "synthetic", "packaged", "fetched")


@dataclass(frozen=True)
class PairSpec:
    """The fields of a pair file."""

    name: str
    kind: str
    target: str | None = None
    draft: str | None = None
    tokenizer: str | None = None  # packaged pairs: the tokenizer's folder (default: the target's)
    dtype: dict[str, str] = field(default_factory=lambda: {"cuda": "bfloat16", "cpu": "float32"})
    attn_implementation: str = "sdpa"
    # hub pairs: None loads each model whole onto the run's device; "auto" spreads a model over every
    # visible GPU (a target too big for one); a dict maps module names to devices, as in transformers.
    device_map: dict[str, Any] | str | None = None
    tiny: dict[str, Any] = field(default_factory=dict)
    synthetic: dict[str, Any] = field(default_factory=dict)
    # fetched pairs: the wheel and model file the target comes from (bench.fetch.FetchSource); the
    # draft is an early-exit draft built from the target and the package folder `draft` names.
    fetch: dict[str, Any] = field(default_factory=dict)
    # The pair's EAGLE draft head (``--drafter eagle``): a hub repo id, or a folder in the package
    # (``reference/...``); docs/eagle.md lists the published heads.
    eagle: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in PAIR_KINDS:
            raise BenchError(
                f"pair {self.name}: kind must be one of {', '.join(PAIR_KINDS)}, got {self.kind!r}"
            )
        if self.kind in ("hub", "packaged"):
            self.models()
        if self.kind == "fetched" and not (self.fetch and self.draft):
            raise BenchError(
                f"pair {self.name}: a fetched pair needs a `fetch` section and a `draft` folder; "
                "see pairs/smollm2.yaml"
            )

    def models(self) -> tuple[str, str]:
        """The target and the draft a hub or packaged pair names (``__post_init__`` refused such a
        pair without both, so a loader reads them typed)."""
        if not (self.target and self.draft):
            raise BenchError(f"pair {self.name}: a {self.kind} pair needs both `target` and `draft` models")
        return self.target, self.draft

    @classmethod
    def from_file(cls, path: Path | Any) -> PairSpec:
        data = load_yaml(path, "pair")
        try:
            return cls(**data)
        except TypeError as exc:
            raise BenchError(f"pair file {path}: {exc}") from None


def pair_names() -> list[str]:
    return sorted(entries("pairs"))


def resolve_pair(name_or_path: str) -> PairSpec:
    """A registry name or a path to a pair YAML file."""
    return PairSpec.from_file(find("pairs", name_or_path))


@dataclass
class Pair:
    """Loaded models sharing one tokenizer."""

    spec: PairSpec
    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def hidden_sizes(self) -> tuple[int, int]:
        """(draft, target) last-layer hidden sizes, the inputs of a DIVERSED head."""
        return hidden_size(self.draft), hidden_size(self.target)

    @property
    def eos_token_ids(self) -> list[int]:
        """EOS ids of the tokenizer and of the target's generation config (chat models have several)."""
        ids = {self.tokenizer.eos_token_id}
        configured = self.target.generation_config.eos_token_id
        ids.update(configured if isinstance(configured, list) else [configured])
        return sorted(i for i in ids if i is not None)

    @property
    def generating_target(self) -> GenerationMixin:
        """The target as transformers' ``generate`` runs it (the comparisons' side, the EAGLE
        trainer's responses): every causal-LM class has it, PreTrainedModel itself declares none."""
        if not isinstance(self.target, GenerationMixin):
            raise BenchError(f"pair {self.spec.name}: the target ({type(self.target).__name__}) has no generate()")
        return self.target

    def text(self, ids: list[int]) -> str:
        """One output's text, special tokens dropped: how every output is read (scored, compared,
        shown). transformers types ``decode`` for a batch too (``str | list[str]``); one sequence
        decodes to a str."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        assert isinstance(text, str)
        return text


def encode_prompt(pair: Pair, prompt: str | list[dict[str, str]], chat_template: bool) -> list[int]:
    """A prompt's token ids: with ``chat_template``, the text as the user turn of the tokenizer's
    chat template, or a whole conversation (its special tokens come from the template, none are
    added again)."""
    if chat_template or not isinstance(prompt, str):
        return list(pair.tokenizer(chat_text(pair, prompt), add_special_tokens=False).input_ids)
    return list(pair.tokenizer(prompt).input_ids)


def chat_text(pair: Pair, prompt: str | list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """A prompt (one user turn, or a whole chat history as lm-eval builds it) in the pair's chat
    template, ready for the assistant's reply."""
    if not getattr(pair.tokenizer, "chat_template", None):
        raise BenchError(f"pair {pair.spec.name}: the tokenizer has no chat template; drop the chat template option")
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = pair.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    assert isinstance(text, str)  # tokenize=False gives the text (transformers types every return)
    return text


class SyntheticTokenizer:
    """Token ids stand for themselves: synthetic pairs are for timing, not text."""

    bos_token_id, eos_token_id, pad_token_id = 1, None, 0

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __call__(self, text: str) -> Any:
        from types import SimpleNamespace

        data = text.encode()
        return SimpleNamespace(
            input_ids=[self.bos_token_id]
            + [2 + (b * 7919 + i) % (self.vocab_size - 2) for i, b in enumerate(data)]
        )

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def hidden_size(model: PreTrainedModel) -> int:
    config = getattr(model.config, "text_config", None) or model.config
    return int(config.hidden_size)


def pick_device(device: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU. Asking for CUDA without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BenchError(f"device {device!r} asked for, but no CUDA GPU is visible; use --device cpu")
    return dev


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_serves_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively. ``torch.ops.mkldnn._is_mkldnn_bf16_supported``
    is ATen's ``mkldnn_bf16_device_check``: the test ``use_mkldnn_bf16_matmul`` makes before it
    sends a bf16 matmul to oneDNN, and the one inductor's ``is_mkldnn_bf16_supported`` reads
    (torch/_inductor/utils.py, torch 2.13). Where it fails (an AVX2-only CPU), ATen's fallback
    kernel runs the matmul: 3.1x slower than fp32 for SmolLM2's MLP on an AVX2-only AMD EPYC."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


_SAID: set[str] = set()


def _say_once(line: str) -> None:
    """One line on stderr per process: configurations resolve their dtype many times per run."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, file=sys.stderr)


def pick_dtype(spec: PairSpec, device: torch.device, dtype: str | None) -> torch.dtype:
    """The dtype asked for, else the pair file's for the device. A pair's bf16 default on a CPU
    without native bf16 matmuls resolves to fp32 (bf16 would be slower there, not faster); an
    explicit bf16 request is kept, with a one-line warning saying why it is slow."""
    name = dtype or spec.dtype.get(device.type, "float32")
    if name not in DTYPES:
        raise BenchError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    if device.type != "cpu" or name != "bfloat16" or cpu_serves_bf16():
        return DTYPES[name]
    why = "this CPU has no native bf16 matmuls (torch.ops.mkldnn._is_mkldnn_bf16_supported() is False)"
    if dtype is None:
        _say_once(f"pair {spec.name}: {why}; loading float32, not the pair file's bfloat16")
        return torch.float32
    _say_once(f"warning: --dtype bfloat16: {why}, so bf16 runs slower than fp32; use --dtype float32")
    return torch.bfloat16


def check_same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase, pair: str) -> None:
    """Speculative decoding compares token ids: both models must use the same vocabulary."""
    if a.get_vocab() != b.get_vocab():
        raise BenchError(
            f"pair {pair}: target and draft tokenizers have different vocabularies; pick models of one family"
        )
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(a, attr) != getattr(b, attr):
            raise BenchError(
                f"pair {pair}: target and draft disagree on {attr} "
                f"({getattr(a, attr)} vs {getattr(b, attr)}); pick models of one family"
            )


def _load_hub_pair(spec: PairSpec, device: torch.device, dtype: torch.dtype) -> Pair:
    """Load both models from the hub (or the local HF cache). Needs network or a warm cache."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.hub import hub_access

    def load(model_id: str, online: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        try:
            tok = AutoTokenizer.from_pretrained(model_id)
            model = AutoModelForCausalLM.from_pretrained(
                model_id,
                dtype=dtype,
                attn_implementation=spec.attn_implementation,
                device_map=spec.device_map or device,  # straight onto the device, no CPU copy first
            )
        except OSError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            where = "the Hugging Face hub" if online else "the local cache (the hub is unreachable)"
            raise BenchError(
                f"cannot load {model_id} from {where} ({first[:200]}); "
                "check network access and `huggingface-cli login`, or run offline with --pair tiny"
            ) from None
        return model.eval(), tok

    target_id, draft_id = spec.models()
    with hub_access() as online:
        target, tok_t = load(target_id, online)
        draft, tok_d = load(draft_id, online)
    check_same_tokenizer(tok_t, tok_d, spec.name)
    share_output_rows(target, draft, len(tok_t), spec.name)
    return Pair(spec, target, draft, tok_t)


def share_output_rows(target: PreTrainedModel, draft: PreTrainedModel, tokens: int, pair: str) -> None:
    """Make both models output the same rows when one pads its vocabulary (Qwen2.5-7B has 152064
    output rows, 0.5B 151936, for the same tokenizer): rows past the shorter head are no token of the
    tokenizer, so both are compared on the rows they share."""
    rows = {m: m.get_output_embeddings().weight.shape[0] for m in (target, draft)}
    shared = min(rows.values())
    if tokens > shared:
        raise BenchError(
            f"pair {pair}: the tokenizer has {tokens} tokens but a model outputs only {shared} logits; "
            "pick models of one family"
        )
    for model, n in rows.items():
        if n > shared:
            model.get_output_embeddings().register_forward_hook(lambda m, i, out: out[..., :shared])


def _load_packaged_pair(spec: PairSpec, device: torch.device, dtype: torch.dtype) -> Pair:
    """Models shipped inside the package (folders relative to ``bench/``; an absolute path is read as
    is), loaded with from_pretrained."""
    from importlib import resources

    from transformers import AutoModelForCausalLM, AutoTokenizer

    def folder(relative: str) -> str:
        path = resources.files("bench") / relative
        if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
            raise BenchError(
                f"pair {spec.name}: no model files at {path}; "
                "reinstall the package, or rebuild them with `python -m bench.reference.train`"
            )
        return str(path)

    target_id, draft_id = spec.models()
    tok = AutoTokenizer.from_pretrained(folder(spec.tokenizer or target_id))
    target, draft = (
        AutoModelForCausalLM.from_pretrained(
            folder(name), dtype=dtype, attn_implementation=spec.attn_implementation, device_map=device
        ).eval()
        for name in (target_id, draft_id)
    )
    return Pair(spec, target, draft, tok)


def _load_fetched_pair(spec: PairSpec, device: torch.device, dtype: torch.dtype) -> Pair:
    """The target from the fetch cache (``bench.fetch``), the draft built from its first layers
    and the fitted correction shipped in the package (``bench.early_exit``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.early_exit import load_early_exit_draft

    source = FetchSource.of(spec.name, spec.fetch)
    folder = fetched_model(spec.name, source)
    tok = AutoTokenizer.from_pretrained(folder)
    target = AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, attn_implementation=spec.attn_implementation, device_map=device
    ).eval()
    assert spec.draft  # PairSpec refuses a fetched pair without its draft folder
    draft = load_early_exit_draft(target, spec.draft, source.member_sha256, spec.name)
    return Pair(spec, target, draft, tok)


def load_pair(name_or_spec: str | PairSpec, device: str = "auto", dtype: str | None = None) -> Pair:
    """Resolve and load a pair onto a device, in the pair's dtype unless one is given. A model whose
    attention the engines would not reproduce exactly is refused here, before anything runs."""
    spec = resolve_pair(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    dev = pick_device(device)
    pair = _load(spec, dev, pick_dtype(spec, dev, dtype))
    for model in (pair.target, pair.draft):
        attention_layout(model)
    return pair


def _load(spec: PairSpec, dev: torch.device, torch_dtype: torch.dtype) -> Pair:
    if spec.kind == "tiny":
        return _load_tiny_pair(spec, dev, torch_dtype)
    if spec.kind == "synthetic":
        return _load_synthetic_pair(spec, dev, torch_dtype)
    if spec.kind == "packaged":
        return _load_packaged_pair(spec, dev, torch_dtype)
    if spec.kind == "fetched":
        return _load_fetched_pair(spec, dev, torch_dtype)
    return _load_hub_pair(spec, dev, torch_dtype)


def _load_tiny_pair(spec: PairSpec, dev: torch.device, torch_dtype: torch.dtype) -> Pair:
    try:
        cfg = TinyConfig(**spec.tiny)
    except TypeError as exc:
        raise BenchError(f"pair {spec.name}: bad tiny settings ({exc})") from None
    target, draft, tok = build_tiny_pair(cfg)
    # transformers types PreTrainedModel.to through a decorator whose signature drops ``self``:
    target, draft = (m.to(dev, torch_dtype) for m in (target, draft))  # type: ignore[arg-type]  # see the line above
    return Pair(spec, target, draft, tok)


def _load_synthetic_pair(spec: PairSpec, dev: torch.device, torch_dtype: torch.dtype) -> Pair:
    s = dict(spec.synthetic)
    try:
        target, draft = build_synthetic_pair(
            s.pop("target_config"), s.pop("draft_config"), device=dev, dtype=torch_dtype, **s
        )
    except (KeyError, TypeError) as exc:
        raise BenchError(f"pair {spec.name}: bad synthetic settings ({exc})") from None
    tok = SyntheticTokenizer(target.config.vocab_size)
    return Pair(spec, target, draft, tok)  # type: ignore[arg-type]  # duck-typed: the calls a timing run makes
