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

from typing import Any

from bench.errors import BenchError

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


def _harness(method: str, params: dict[str, Any], head: str | None, setting: dict[str, Any]) -> str:
    flags = " ".join(f"--param {k}={v}" for k, v in params.items())
    head_flag = f" --head {head}" if head else ""
    return (
        f"diversed-bench generate PROMPT --pair {setting['pair']} --method {method} {flags}{head_flag} "
        f"--draft-len {setting['draft_len']} --temperature {setting['temperature']:g}"
    ).replace("  ", " ")


def how_to_run(method: str, params: dict[str, Any], head: str | None, setting: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, what to write) for one measured setting: every engine that ships its rule, then this
    harness's ``generate`` (always, with the setting's exact parameters). ``setting``: the row's
    pair, draft_len and temperature."""
    target, draft = _models(setting["pair"])
    n, t = int(setting["draft_len"]), float(setting["temperature"])
    sample = f"do_sample=True, temperature={t:g}" if t > 0 else "do_sample=False"
    out: list[tuple[str, str]] = []
    if method == "sd":
        out += [
            ("transformers", f"model.generate(**inputs, assistant_model=draft, num_assistant_tokens={n}, "
                             f'num_assistant_tokens_schedule="constant", {sample})'),
            ("vLLM (V1, lossless)", f'LLM(model="{target}", speculative_config={{"model": "{draft}", '
                                    f'"num_speculative_tokens": {n}}})'),
        ]  # fmt: skip
    elif method == "ensemble" and params.get("mix", "prob") == "prob" and 0 < params["target_weight"] < 1:
        w = params["target_weight"]
        out.append(
            (f"transformers >= {TRANSFORMERS_ENSEMBLE}",
             f"model.generate(**inputs, assistant_model=draft, assistant_ensemble_weight={w:g}, "
             f'num_assistant_tokens={n}, num_assistant_tokens_schedule="constant", {sample})  # w weights the target')
        )  # fmt: skip
    elif method == "threshold":
        single, acc = params["speculative_accept_threshold_single"], params["speculative_accept_threshold_acc"]
        out.append(
            ("SGLang", f"python -m sglang.launch_server --model-path {target} --speculative-algorithm STANDALONE "
                       f"--speculative-draft-model-path {draft} --speculative-num-steps {n} --speculative-eagle-topk 1 "
                       f"--speculative-num-draft-tokens {n + 1} --speculative-accept-threshold-single {single:g} "
                       f"--speculative-accept-threshold-acc {acc:g}  # drafts greedily (EAGLE top-1 chain)")
        )  # fmt: skip
    elif method == "relaxed":
        out.append(
            ("TensorRT-LLM", f'LLM(model="{target}", speculative_config=MTPDecodingConfig(num_nextn_predict_layers={n}, '
                             f"use_relaxed_acceptance_for_thinking=True, relaxed_topk={params['relaxed_topk']}, "
                             f"relaxed_delta={params['relaxed_delta']:g}))  # only inside the thinking phase "
                             "(<think> ... </think>), strict elsewhere; the draft is the model's own MTP modules")
        )  # fmt: skip
    elif method == "typical":
        out.append(
            (f"vLLM V0 only (<= {VLLM_V0_LAST}; V1 verifies losslessly and has no typical acceptance)",
             f'LLM(model="{target}", speculative_model="{draft}", num_speculative_tokens={n}, '
             'spec_decoding_acceptance_method="typical_acceptance_sampler", '
             f"typical_acceptance_sampler_posterior_threshold={params['posterior_threshold']:g}, "
             f"typical_acceptance_sampler_posterior_alpha={params['posterior_alpha']:g})")
        )  # fmt: skip
    shipped = "no engine ships this rule: " if not out else ""
    out.append((f"{shipped}this harness", _harness(method, params, head, setting)))
    return out
