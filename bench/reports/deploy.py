"""How to run a measured setting outside the harness: the engine that ships its rule, with the
engine's own parameter names, or this harness's ``generate`` for the rules no engine ships.

The names were read in the engines' sources (docs/recommend.md cites each file):

- transformers >= 5.14: ``GenerationConfig.assistant_ensemble_weight`` (the static ensemble; w
  weights the target, open interval (0, 1), None is lossless), ``num_assistant_tokens``,
  ``num_assistant_tokens_schedule`` (``transformers/generation/configuration_utils.py``;
  ``_speculative_sampling`` in ``transformers/generation/utils.py``). 5.13.0 has no such field.
- SGLang: ``--speculative-accept-threshold-single`` / ``--speculative-accept-threshold-acc``
  (``python/sglang/srt/server_args.py``), applied by its tree verification kernel.
- TensorRT-LLM: ``MTPDecodingConfig(use_relaxed_acceptance_for_thinking, relaxed_topk,
  relaxed_delta)`` (``tensorrt_llm/llmapi/llm_args.py``), applied only inside a reasoning model's
  thinking phase (between its begin and end thinking tokens), strict elsewhere, and only with the
  model's own MTP modules as the draft.
- vLLM: V1 (``vllm/v1/sample/rejection_sampler.py``) verifies losslessly; its typical acceptance
  (``spec_decoding_acceptance_method="typical_acceptance_sampler"``) went with V0 (releases 0.5.1
  to 0.9.2, removed in 0.10.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.errors import BenchError
from bench.verifiers import MethodInfo

TRANSFORMERS_ENSEMBLE = "5.14.0"  # the first release with assistant_ensemble_weight (5.13.0 has none)
VLLM_V0_LAST = "0.9.2"  # the last release with the V0 typical acceptance sampler


def _models(pair: str) -> tuple[str, str]:
    """The pair's target and draft as an engine loads them: a hub pair's ids, else placeholders
    (TARGET, DRAFT: the paths of the pair's models)."""
    from bench.pairs import resolve_pair

    try:
        spec = resolve_pair(pair)
    except BenchError:
        return "TARGET", "DRAFT"
    if spec.kind == "hub" and spec.target and spec.draft:
        return spec.target, spec.draft
    return "TARGET", "DRAFT"


def _harness(method: str, params: dict[str, Any], head: str | None, setting: Mapping[str, Any]) -> str:
    flags = " ".join(f"--param {k}={v}" for k, v in params.items())
    head_flag = f" --head {head}" if head else ""
    draft_len = f"--draft-len {setting['draft_len']} " if method != "ar" else ""  # ar drafts nothing
    return (
        f"diversed-bench generate PROMPT --pair {setting['pair']} --method {method} {flags}{head_flag} "
        f"{draft_len}--temperature {setting['temperature']:g}"
    ).replace("  ", " ")


@dataclass(frozen=True)
class Setting:
    """What every engine's call needs besides the rule's parameters."""

    target: str
    draft: str
    n: int  # draft length
    sample: str  # transformers' sampling keywords

    def transformers(self, extra: str = "") -> str:
        return (
            f"model.generate(**inputs, assistant_model=draft, {extra}num_assistant_tokens={self.n}, "
            f'num_assistant_tokens_schedule="constant", {self.sample})'
        )


def _ar(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    """The target alone: every engine runs it; no draft model, nothing speculative."""
    return [("transformers", f"model.generate(**inputs, {s.sample})"), ("vLLM", f'LLM(model="{s.target}")')]


def _sd(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    v1 = f'LLM(model="{s.target}", speculative_config={{"model": "{s.draft}", "num_speculative_tokens": {s.n}}})'
    return [("transformers", s.transformers()), ("vLLM (V1, lossless)", v1)]


def _ensemble(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    w = p["target_weight"]
    if p.get("mix", "prob") != "prob" or not 0 < w < 1:  # the logit mix is the authors' code only
        return []
    call = s.transformers(f"assistant_ensemble_weight={w:g}, ") + "  # w weights the target"
    return [(f"transformers >= {TRANSFORMERS_ENSEMBLE}", call)]


def _sglang(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    single, acc = p["speculative_accept_threshold_single"], p["speculative_accept_threshold_acc"]
    return [
        (
            "SGLang",
            f"python -m sglang.launch_server --model-path {s.target} --speculative-algorithm STANDALONE "
            f"--speculative-draft-model-path {s.draft} --speculative-num-steps {s.n} "
            f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {s.n + 1} "
            f"--speculative-accept-threshold-single {single:g} --speculative-accept-threshold-acc {acc:g}"
            "  # drafts greedily (EAGLE top-1 chain)",
        )
    ]


def _tensorrt_llm(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    config = (
        f"MTPDecodingConfig(num_nextn_predict_layers={s.n}, use_relaxed_acceptance_for_thinking=True, "
        f"relaxed_topk={p['relaxed_topk']}, relaxed_delta={p['relaxed_delta']:g})"
    )
    note = "only inside the thinking phase (<think> ... </think>), strict elsewhere; the draft is the model's MTP"
    return [("TensorRT-LLM", f'LLM(model="{s.target}", speculative_config={config})  # {note}')]


def _vllm_v0(p: dict[str, Any], s: Setting) -> list[tuple[str, str]]:
    return [
        (
            f"vLLM V0 only (<= {VLLM_V0_LAST}; V1 verifies losslessly and has no typical acceptance)",
            f'LLM(model="{s.target}", speculative_model="{s.draft}", num_speculative_tokens={s.n}, '
            'spec_decoding_acceptance_method="typical_acceptance_sampler", '
            f"typical_acceptance_sampler_posterior_threshold={p['posterior_threshold']:g}, "
            f"typical_acceptance_sampler_posterior_alpha={p['posterior_alpha']:g})",
        )
    ]


# The engine calls that ship a rule, by the key a verifier class declares (``Verifier.shipped_in``).
ENGINE_CALLS = {
    "target_alone": _ar,
    "lossless": _sd,
    "transformers_ensemble": _ensemble,
    "sglang_threshold": _sglang,
    "tensorrt_llm_relaxed": _tensorrt_llm,
    "vllm_v0_typical": _vllm_v0,
}


def how_to_run(
    info: MethodInfo, params: dict[str, Any], head: str | None, setting: Mapping[str, Any]
) -> list[tuple[str, str]]:
    """(where, what to write) for one measured setting of the method ``info`` describes: every
    engine call its class declares (``shipped_in``), then this harness's ``generate`` (always, with
    the setting's exact parameters). ``setting``: the row's pair, draft_len and temperature."""
    target, draft = _models(setting["pair"])
    t = float(setting["temperature"])
    sample = f"do_sample=True, temperature={t:g}" if t > 0 else "do_sample=False"
    call = ENGINE_CALLS.get(info.shipped_in) if info.shipped_in else None
    engines = call(params, Setting(target, draft, int(setting["draft_len"]), sample)) if call else []
    shipped = "" if engines else "no engine ships this rule: "
    return [*engines, (f"{shipped}this harness", _harness(info.name, params, head, setting))]
