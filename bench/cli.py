"""The ``diversed-bench`` command line. Each command is a thin layer over a module of ``bench``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Optional

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

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


ENGINE_HELP = (
    "eager (the reference) or compiled (static KV cache, torch.compile'd steps, CUDA graphs on GPU)."
)
TRUNCATE_HELP = (
    "none (default): refuse a prompt whose length + the token budget exceeds a model's context; "
    "left: keep the prompt's last tokens (and its BOS) instead; rows record how many were dropped."
)
DRAFT_POLICY_HELP = (
    "sample (draw drafts from q) or greedy (draft the argmax of q); default: what the method's "
    "engine does (greedy for threshold and relaxed, sample for the others)."
)
DEVICE_HELP = "auto, cpu, cuda or cuda:N."
DTYPE_HELP = "float32, bfloat16 or float16 (default: the pair file's)."
THREADS_HELP = (
    "CPU threads per operator (torch.set_num_threads; default: torch's). The kernels of a tiny "
    "model are too small to split, so one thread is faster there; the results name the count."
)


def _set_threads(threads: Optional[int]) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(_positive(str(threads), "--threads"))


@app.command()
def generate(
    prompt: Optional[str] = typer.Argument(
        None, help="The text: the raw prompt, or with --task what fills the task's query."
    ),
    task: Optional[str] = typer.Option(
        None, help="Apply this task's template and few-shot exemplars, as `run` does (name or YAML path)."
    ),
    example: Optional[str] = typer.Option(
        None, help="With --task: decode this dataset example (its example_id) instead of PROMPT."
    ),
    data: Optional[str] = typer.Option(
        None, help="With --task: hub, fixture or a local path (default as in `run`)."
    ),
    chat_template: bool = typer.Option(False, help="Wrap the prompt in the tokenizer's chat template."),
    pair: str = typer.Option("tiny", help="Pair name or pair YAML path."),
    method: str = typer.Option("sd", help="Method name or module:Class of a verifier."),
    draft_len: int = typer.Option(5, help="Drafted tokens per round."),
    temperature: float = typer.Option(1.0, help="0 = greedy."),
    max_new_tokens: int = typer.Option(64, help="Token budget of each completion."),
    target_weight: float = typer.Option(0.7, help="ensemble: weight of the target."),
    head: Optional[str] = typer.Option(None, help="diversed: trained head folder, or 'init' (w = 0.5)."),
    seed: int = typer.Option(0, help="Seeds the sampler."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    engine: str = typer.Option("eager", help=ENGINE_HELP),
    truncate_prompt: str = typer.Option("none", help=TRUNCATE_HELP),
    draft_policy: Optional[str] = typer.Option(None, help=DRAFT_POLICY_HELP),
) -> None:
    """Decode one prompt and print the text and its acceptance counters. Without --task the prompt
    is used raw; with --task it is wrapped in the task's template and exemplars, as `run` does.

    Example: diversed-bench generate "Question: 2 + 3?" --method ensemble --target-weight 0.6

    Example: diversed-bench generate "347 + 285" --task arith --pair ref --method sd
    """
    from bench.context import Context, check_truncation, fit_prompt
    from bench.decoding import SpeculativeDecoder
    from bench.distributions import Sampling
    from bench.engines import make_engine
    from bench.head import required_head
    from bench.pairs import load_pair, resolve_pair
    from bench.runner import Runner
    from bench.verifiers import make_verifier

    text, note = _generate_prompt(prompt, task, example, data, resolve_pair(pair).kind)
    params = {"target_weight": target_weight} if method == "ensemble" else {}
    verifier = make_verifier(method, **params)
    check_truncation(truncate_prompt)
    factory = make_engine(engine)
    loaded = load_pair(pair, device=device)
    weight_head = (
        required_head(head, method, loaded.spec.name, loaded.hidden_sizes, loaded.device)
        if verifier.needs_hidden
        else None
    )
    decoder = SpeculativeDecoder(
        loaded.target,
        loaded.draft,
        verifier,
        draft_len=draft_len,
        sampling=Sampling(temperature),
        eos_token_ids=loaded.eos_token_ids,
        head=weight_head,
        engine=factory,
        draft_policy=draft_policy,
    )
    ids, dropped = fit_prompt(
        Runner.encode(loaded, text, chat_template),
        max_new_tokens,
        Context.of(loaded.target, loaded.draft if verifier.uses_draft else None),
        truncate_prompt,
        example="generate",
        bos_token_id=loaded.tokenizer.bos_token_id,
    )
    typer.echo(f"--- prompt: {note}, {len(ids)} tokens ---\n{text}\n--- completion ---", err=True)
    gen = decoder.generate(ids, max_new_tokens, seed=seed)
    s = gen.stats
    typer.echo(loaded.tokenizer.decode(gen.token_ids, skip_special_tokens=True))
    cut = f", {dropped} prompt tokens dropped" if dropped else ""
    typer.echo(
        f"\n[{method}] {s.new_tokens} tokens in {s.rounds} rounds, acceptance_rate "
        f"{s.acceptance_rate:.3f}, acceptance_length {s.acceptance_length:.2f}, {s.wall_time_s:.3f} s{cut}"
    )


def _generate_prompt(
    prompt: Optional[str], task: Optional[str], example: Optional[str], data: Optional[str], pair_kind: str
) -> tuple[str, str]:
    """The text `generate` decodes, and a note saying where it came from."""
    if task is None:
        if prompt is None or example is not None or data is not None:
            raise BenchError("give a PROMPT; --example and --data need --task T")
        return prompt, "the raw text given (no task template: pass --task T to decode what `run` decodes)"
    from bench.tasks import Task, default_data, resolve_task

    spec = resolve_task(task)
    bound = Task(spec, data or default_data(spec.name, pair_kind))
    if (prompt is None) == (example is None):
        raise BenchError(
            f"with --task {spec.name}, give either a PROMPT or --example ID, not both or neither"
        )
    text = bound.example(example).prompt if example is not None else bound.render_text(prompt or "")
    shots = f"{bound.spec.num_fewshot}-shot from {bound.data}" if bound.spec.num_fewshot else "0-shot"
    what = f"example {example}" if example is not None else "the text given"
    return text, f"task {spec.name}'s template around {what}, {shots}"


PAPER_TASKS = "gsm8k,cnndm,xsum,mbpp"
ALL_METHODS = "ar,sd,lossy,cascade,ensemble,diversed"


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(t) for t in _list(text)]
    except ValueError:
        raise BenchError(f"{flag} takes comma-separated numbers, got {text!r}") from None


def _positive(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise BenchError(f"{flag}: {text!r} is not a positive integer")
    return value


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise BenchError(f"--shard takes i/k (e.g. 0/4), got {text!r}") from None
    if not 0 <= index < count:
        raise BenchError(f"--shard {text}: need 0 <= i < k")
    return index, count


@app.command()
def run(
    task: str = typer.Option(PAPER_TASKS, help="Task names or YAML paths, comma-separated."),
    pair: str = typer.Option("tiny", help="Pair names or YAML paths, comma-separated."),
    method: str = typer.Option(ALL_METHODS, help="Methods (or module:Class verifiers), comma-separated."),
    target_weight: str = typer.Option("0.7", help="ensemble: target weight(s) in (0, 1]; a list sweeps."),
    lenience: str = typer.Option("0.5", help="lossy: lenience value(s) in (0, 1]."),
    cascade_rule: str = typer.Option("opt", help="cascade: chow, diff, opt and/or token."),
    cascade_alpha: str = typer.Option("0.5", help="cascade: alpha value(s) in [0, 1]."),
    head: str = typer.Option(
        "", help="diversed: trained head folder(s), or 'init' for an untrained w = 0.5 head."
    ),
    mix: str = typer.Option("prob", help="ensemble mixing: prob (paper) or logit (authors' code)."),
    param: Optional[list[str]] = typer.Option(
        None,
        "--param",
        help="Any method's parameter by its name (see `list`), name=value[,value...] sweeps; repeatable. "
        "E.g. --param posterior_alpha=0.3,0.5 --param relaxed_topk=10.",
    ),
    data: Optional[str] = typer.Option(
        None, help="hub, fixture or a local path (default: fixture for tiny, hub otherwise)."
    ),
    limit: Optional[int] = typer.Option(
        None, help="First N examples of the seeded permutation (default: all)."
    ),
    seed: int = typer.Option(0, help="Seeds the example subset and every sample."),
    draft_len: int = typer.Option(5, help="Drafted tokens per round (N)."),
    temperature: float = typer.Option(1.0, help="Sampling temperature; 0 = greedy."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Token budget (default: the task file's, 128)."),
    num_fewshot: Optional[int] = typer.Option(None, help="Override the task's number of exemplars."),
    split: Optional[str] = typer.Option(
        None, help="Evaluation split (default: the task file's; mbpp: validation = the authors')."
    ),
    chat_template: bool = typer.Option(False, help="Wrap prompts in the tokenizer's chat template."),
    truncate_prompt: str = typer.Option("none", help=TRUNCATE_HELP),
    draft_policy: Optional[str] = typer.Option(None, help=DRAFT_POLICY_HELP),
    output_dir: Path = typer.Option(Path("results"), help="Results directory (a parquet dataset)."),
    plots_dir: Optional[Path] = typer.Option(
        None, help="Where the plots go after the run (default: OUTPUT_DIR/plots, beside the table)."
    ),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    grid: Optional[str] = typer.Option(
        None,
        help="A grid YAML (or 'paper', 'tiny', 'demo') listing tasks x pairs x methods; 'baselines' sweeps "
        "every baseline family for `compare`: --grid baselines --method my.py:MyVerifier --task T --pair P.",
    ),
    shard: str = typer.Option("0/1", help="Run only share i of k of every configuration's examples."),
    batch_size: int = typer.Option(
        16, help="Examples decoded together; their rows carry no time (same tokens as batch 1)."
    ),
    timing_examples: int = typer.Option(
        4, help="First K examples of every configuration decoded alone and timed, methods interleaved."
    ),
    engine: str = typer.Option("eager", help=ENGINE_HELP),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
    report: bool = typer.Option(True, help="Print the table and write the plots at the end."),
    progress: bool = typer.Option(
        True, help="Show progress: a bar on a terminal, one line per configuration in a log or pipe."
    ),
    sandbox: str = typer.Option(
        "bwrap", help="Jail for generated code: bwrap, or guard (weaker; only where bwrap cannot run)."
    ),
    trace: bool = typer.Option(
        False, help="Also store every token's fate, p, q and weight in RESULTS/traces/ (for `report`)."
    ),
) -> None:
    """Decode every example with every method; rows are flushed as they finish, and re-running
    the same command resumes where it stopped.

    Example: diversed-bench run --task cnndm --pair qwen3 --method ar,sd,ensemble --target-weight 0.5,0.7,0.9
    """
    from bench.grid import configs_from_grid, configs_from_flags
    from bench.runner import Runner, parse_params
    from bench.sandbox import use_sandbox

    use_sandbox(sandbox)
    _set_threads(threads)

    if grid:
        given = {
            "--target-weight": target_weight != "0.7",
            "--lenience": lenience != "0.5",
            "--cascade-rule": cascade_rule != "opt",
            "--cascade-alpha": cascade_alpha != "0.5",
            "--mix": mix != "prob",
            "--param": bool(param),
            "--data": data is not None,
            "--seed": seed != 0,
            "--draft-len": draft_len != 5,
            "--temperature": temperature != 1.0,
            "--max-new-tokens": max_new_tokens is not None,
            "--num-fewshot": num_fewshot is not None,
            "--split": split is not None,
            "--chat-template": chat_template,
            "--truncate-prompt": truncate_prompt != "none",
            "--draft-policy": draft_policy is not None,
        }
        clash = [flag for flag, set_ in given.items() if set_]
        if clash:
            raise BenchError(
                f"--grid sets tasks, pairs, methods and their settings; drop {', '.join(clash)} or edit the "
                "grid file (only --limit, --device, --dtype, --output-dir, --shard, --batch-size, "
                "--timing-examples, --engine and --threads combine with --grid, and --task, --pair, "
                "--method, --head with a grid that leaves tasks and pairs open, such as baselines)"
            )
        configs, limit = configs_from_grid(
            grid,
            device=device,
            dtype=dtype,
            limit=limit,
            tasks=_list(task) if task != PAPER_TASKS else [],
            pairs=_list(pair) if pair != "tiny" else [],
            candidates=_list(method) if method != ALL_METHODS else [],
            heads=_list(head),
        )
    else:
        methods = _list(method)
        heads = _list(head)
        if "diversed" in methods and not heads:
            typer.echo(
                "diversed: skipped, no --head given. Train one with `diversed-bench train --task TASK --pair PAIR`, "
                "then pass --head PATH (or --head init for an untrained w = 0.5 head).",
                err=True,
            )
            methods.remove("diversed")
        configs = configs_from_flags(
            tasks=_list(task),
            pairs=_list(pair),
            methods=methods,
            target_weights=_floats(target_weight, "--target-weight"),
            lenience=_floats(lenience, "--lenience"),
            cascade_rules=_list(cascade_rule),
            cascade_alphas=_floats(cascade_alpha, "--cascade-alpha"),
            heads=heads,
            mix=mix,
            params=parse_params(param or []),
            data=data,
            seed=seed,
            draft_len=draft_len,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            num_fewshot=num_fewshot,
            split=split,
            chat_template=chat_template,
            truncate_prompt=truncate_prompt,
            draft_policy=draft_policy,
            device=device,
            dtype=dtype,
        )
    from bench.distributed import Launch

    launch = Launch.from_env(device)
    index, count = _shard(shard)
    partition = (index * launch.world_size + launch.rank, count * launch.world_size)
    runner = Runner(
        output_dir,
        limit=limit,
        partition=partition,
        device=launch.device,
        batch_size=batch_size,
        timing_examples=timing_examples,
        engine=engine,
        progress=progress and launch.rank == 0,
        log=lambda m: typer.echo(m, err=True),
        trace=trace,
    )
    try:
        runner.run(configs)
    except KeyboardInterrupt:
        typer.echo(
            f"\ninterrupted: {output_dir}/ holds every finished example ({runner.store.rows_written} written "
            f"by this run); resume with: diversed-bench {shlex.join(sys.argv[1:])}",
            err=True,
        )
        raise typer.Exit(130) from None
    launch.finish()
    if report and count == 1 and launch.rank == 0:
        _report(output_dir, plots_dir or output_dir / "plots", "markdown")


def _report(results: Path, plots_dir: Path, fmt: str) -> None:
    from bench.reports.plots import write_plots
    from bench.reports.table import write_table

    text, path = write_table(results, fmt)
    typer.echo(text)
    typer.echo(f"table written to {path}")
    paths = write_plots(results, plots_dir)
    typer.echo(
        f"{len(paths)} plot files written to {plots_dir}/: "
        + ", ".join(p.name for p in paths if p.suffix == ".png")
    )


@app.command("list")
def list_() -> None:
    """Show the tasks, pairs and methods (with their parameters and defaults).

    Example: diversed-bench list
    """
    from dataclasses import MISSING, fields

    from bench.pairs import pair_names, resolve_pair
    from bench.tasks import resolve_task, task_names
    from bench.verifiers import VERIFIERS

    names = [*task_names(), *pair_names(), *VERIFIERS]
    width = max(map(len, names)) + 2
    typer.echo("tasks:")
    for name in task_names():
        spec = resolve_task(name)
        source = spec.dataset.get("path") or spec.dataset.get("loader")
        typer.echo(
            f"  {name:<{width}}{source} [{spec.dataset['split']}], {spec.num_fewshot}-shot, "
            f"quality {spec.quality}"
        )
    typer.echo("pairs:")
    for name in pair_names():
        spec = resolve_pair(name)
        what = {
            "hub": f"{spec.target} / {spec.draft}",
            "packaged": f"bench/{spec.target} / bench/{spec.draft}, shipped in the package, offline",
        }.get(spec.kind, "built in code, offline")
        typer.echo(f"  {name:<{width}}{what}")
    typer.echo("methods (the rule, then the parameters' defaults):")
    for name, cls in VERIFIERS.items():
        params = ", ".join(f"{f.name}={f.default}" for f in fields(cls) if f.default is not MISSING)
        extra = " (needs --head)" if cls.needs_hidden else ""
        extra += " (drafts greedily)" if cls.uses_draft and cls.draft_policy == "greedy" else ""
        typer.echo(f"  {name:<{width}}{(cls.__doc__ or '').strip().splitlines()[0]}")
        typer.echo(f"  {'':<{width}}{params or 'no parameters'}{extra}")


@app.command()
def table(
    results: Path = typer.Argument(Path("results"), help="Results directory."),
    format: str = typer.Option("markdown", "--format", help="markdown, latex or csv."),
    output: Optional[Path] = typer.Option(None, help="File to write (default: RESULTS/table.md|tex|csv)."),
) -> None:
    """Print Table 1 (methods x tasks: acceptance rate, quality) plus normalised time, speedup and
    acceptance length, with 95% bootstrap intervals.

    Example: diversed-bench table results --format latex
    """
    from bench.reports.table import write_table

    text, path = write_table(results, format, output)
    typer.echo(text)
    typer.echo(f"written to {path}")


@app.command()
def plot(
    results: Path = typer.Argument(Path("results"), help="Results directory."),
    output_dir: Optional[Path] = typer.Option(
        None, help="Folder for the PNG, PDF and SVG files (default: RESULTS/plots)."
    ),
) -> None:
    """Write the Pareto frontier, acceptance vs weight, acceptance per position (and DIVERSED
    weights) as PNG, PDF and SVG, each with a caption file naming its settings.

    Example: diversed-bench plot results --output-dir figures
    """
    from bench.reports.plots import write_plots

    paths = write_plots(results, output_dir or results / "plots")
    typer.echo("\n".join(str(p) for p in paths))


@app.command()
def compare(
    results: Path = typer.Argument(Path("results"), help="Results directory."),
    candidate: Optional[list[str]] = typer.Option(
        None, "--candidate", help="Method or label (as `table` prints it) to judge; repeatable."
    ),
    format: str = typer.Option("markdown", "--format", help="markdown, csv, json or latex."),
) -> None:
    """Judge a candidate verifier against every swept baseline family: its quality minus the
    family's frontier at its acceptance rate, with a paired 95% bootstrap interval, and a verdict
    (above / indistinguishable / below). Baseline sweeps: run --grid baselines --method CANDIDATE
    --task T --pair P.

    Example: diversed-bench compare results --candidate diversed
    """
    from bench.reports.compare import write_compare

    typer.echo(write_compare(results, candidate or [], format))


@app.command()
def report(
    results: Path = typer.Argument(Path("results"), help="Results directory."),
    output: Path = typer.Option(Path("report.html"), help="The HTML file to write."),
    candidate: Optional[list[str]] = typer.Option(
        None, "--candidate", help="Method or label to judge against the baselines (as `compare`); repeatable."
    ),
    token_examples: int = typer.Option(100, help="Examples whose token traces the page carries."),
) -> None:
    """Write one self-contained HTML page: settings, Table 1, Pareto plots, compare verdicts and,
    for runs with --trace, a token view coloured by each token's fate.

    Example: diversed-bench report results --candidate diversed --output report.html
    """
    from bench.reports.html import write_report

    path = write_report(results, output, candidate or [], token_examples)
    typer.echo(f"written to {path} ({path.stat().st_size / 1e6:.2f} MB)")


@app.command()
def train(
    task: str = typer.Option(..., help="Task whose train split supplies prompts and reward."),
    pair: str = typer.Option("tiny", help="Pair name or pair YAML path."),
    algorithm: str = typer.Option("reinforce", help="reinforce or reinforce++."),
    lr: float = typer.Option(5e-4, help="AdamW learning rate."),
    batch_size: int = typer.Option(8, help="Rollouts per update."),
    epochs: int = typer.Option(2, help="Passes over the drawn prompts."),
    num_prompts: int = typer.Option(400, help="Prompts drawn from the train split."),
    reg_weight: float = typer.Option(0.01, help="Weight of the expected-acceptance regulariser."),
    temperature: float = typer.Option(1.0, help="Rollout temperature (> 0)."),
    rollout_tokens: int = typer.Option(128, help="Tokens per rollout."),
    data: Optional[str] = typer.Option(None, help="hub, fixture or a local folder with train.jsonl."),
    output_dir: Optional[Path] = typer.Option(
        None, help="Head folder (default: heads/TASK-PAIR); resumed if it holds a checkpoint."
    ),
    seed: int = typer.Option(0, help="Seeds the prompts drawn and every rollout."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    engine: str = typer.Option("eager", help="Rollout engine: " + ENGINE_HELP),
    truncate_prompt: str = typer.Option("none", help=TRUNCATE_HELP.replace("token budget", "rollout length")),
) -> None:
    """Train a DIVERSED weight head with both models frozen; writes head.safetensors, card.json,
    train_log.parquet and a checkpoint that a re-run resumes from.

    Example: diversed-bench train --task gsm8k --pair llama3 --algorithm reinforce++
    """
    from bench.engines import make_engine
    from bench.pairs import load_pair, resolve_pair
    from bench.tasks import Task, default_data, resolve_task
    from bench.train import TrainConfig, Trainer, describe

    factory = make_engine(engine)

    cfg = TrainConfig(
        algorithm=algorithm,
        lr=lr,
        batch_size=batch_size,
        epochs=epochs,
        num_prompts=num_prompts,
        reg_weight=reg_weight,
        temperature=temperature,
        rollout_tokens=rollout_tokens,
        seed=seed,
        truncate_prompt=truncate_prompt,
    )
    spec = resolve_task(task)
    if "fewshot_split" not in spec.dataset:
        raise BenchError(f"task {spec.name} has no train split to train a head on; pick another task")
    source = data or default_data(spec.name, resolve_pair(pair).kind)
    train_task = Task(spec, source, split=spec.dataset["fewshot_split"])
    loaded = load_pair(pair, device=device, dtype=dtype)
    folder = output_dir or Path("heads") / f"{spec.name}-{loaded.spec.name}"
    trainer = Trainer(
        loaded, train_task, cfg, folder, data=source, log=lambda r: typer.echo(describe(r)), engine=factory
    )
    trainer.train()
    typer.echo(
        f"head written to {folder}/ ; use it with: diversed-bench run --method diversed --head {folder}"
    )


@app.command()
def speed(
    pair: str = typer.Option(
        "tiny", help="Pair name or YAML (llama3-shapes: real 8B/1B shapes, random weights)."
    ),
    draft_len: str = typer.Option("1,3,5,8", help="Draft lengths to measure, comma-separated."),
    method: str = typer.Option("sd,ensemble", help="sd, or sd,ensemble to also time the static ensemble."),
    target_weight: float = typer.Option(0.7, help="Weight for the ensemble comparison."),
    prompts: int = typer.Option(8, help="Number of prompts (fixture CNNDM articles)."),
    max_new_tokens: int = typer.Option(64, help="Token budget of each completion."),
    repeats: int = typer.Option(3, help="Repeats per measurement; the median is reported."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    output_dir: Path = typer.Option(Path("results"), help="Where speed_PAIR.md/.json/.png go."),
    throughput: bool = typer.Option(
        False, help="Instead: examples/s and tokens/s of ar and sd per batch size (speed_throughput_PAIR.*)."
    ),
    batch_sizes: str = typer.Option("1,4,16,64", help="--throughput: batch sizes, comma-separated."),
    examples: int = typer.Option(64, help="--throughput: examples decoded at every batch size."),
    engine: str = typer.Option(
        "eager", help="eager, compiled, or eager,compiled to time both (ratios against the first)."
    ),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
) -> None:
    """Time the harness against transformers generate() and assisted generation, and against the
    ideal speedup S(alpha, N, c); checks that greedy outputs agree. With --throughput, time batched
    decoding instead, checking that every batch size gives batch 1's outputs.

    Example: diversed-bench speed --pair tiny --draft-len 3,5 --repeats 5

    Example: diversed-bench speed --throughput --pair tiny --draft-len 5 --batch-sizes 1,4,16,64
    """
    import json

    from bench.pairs import load_pair
    from bench.engines import make_engine
    from bench.speed import markdown, measure, plot, throughput_markdown
    from bench.speed import throughput as measure_throughput
    from bench.tasks import Task, resolve_task

    engines = {name: make_engine(name) for name in _list(engine)}
    if not engines:
        raise BenchError("--engine takes eager, compiled or eager,compiled")
    _set_threads(threads)

    if throughput:
        sizes = [_positive(b, "--batch-sizes") for b in _list(batch_sizes)]
        lens = [_positive(n, "--draft-len") for n in _list(draft_len)]
        if len(lens) != 1 or examples < 1:
            raise BenchError("--throughput takes one --draft-len and --examples >= 1")
        if len(engines) != 1:
            raise BenchError("--throughput times one engine at a time: give a single --engine")
        loaded = load_pair(pair, device=device, dtype=dtype)
        texts = [e.doc["article"] for e in Task(resolve_task("cnndm"), "fixture").examples()]
        encoded = [list(loaded.tokenizer(texts[i % len(texts)]).input_ids) for i in range(examples)]
        result = measure_throughput(
            loaded,
            encoded,
            sizes,
            lens[0],
            max_new_tokens,
            repeats,
            log=typer.echo,
            engine=next(iter(engines.values())),
        )
        output_dir.mkdir(parents=True, exist_ok=True)
        stem = output_dir / f"speed_throughput_{loaded.spec.name}"
        text = throughput_markdown(result, "diversed-bench " + shlex.join(sys.argv[1:]))
        stem.with_suffix(".md").write_text(text)
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
        typer.echo(text)
        typer.echo(f"written: {stem}.md, {stem}.json")
        return
    methods = _list(method)
    unknown = set(methods) - {"sd", "ensemble"}
    if unknown or "sd" not in methods:
        raise BenchError(f"--method takes sd or sd,ensemble, got {method!r}")
    loaded = load_pair(pair, device=device, dtype=dtype)
    texts = [e.doc["article"] for e in Task(resolve_task("cnndm"), "fixture").examples()][:prompts]
    encoded = [list(loaded.tokenizer(t).input_ids) for t in texts]
    result = measure(
        loaded,
        encoded,
        [int(n) for n in _list(draft_len)],
        max_new_tokens,
        repeats,
        target_weight if "ensemble" in methods else None,
        log=typer.echo,
        engines=engines,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = output_dir / f"speed_{loaded.spec.name}"
    text = markdown(result, "diversed-bench " + shlex.join(sys.argv[1:]))
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    plot(result, stem.with_suffix(".png"))
    typer.echo(text)
    typer.echo(f"written: {stem}.md, {stem}.json, {stem}.png")


@app.command()
def merge(
    sources: list[Path] = typer.Argument(..., help="Results directories to combine (e.g. one per job)."),
    output_dir: Path = typer.Option(..., help="The combined results directory."),
) -> None:
    """Combine shards into one results directory, refusing shards that ran different settings
    (seed, draft length) or library versions for one configuration.

    Example: diversed-bench merge shards/job0 shards/job1 shards/job2 --output-dir results
    """
    from bench.store import merge as merge_dirs

    rows = merge_dirs(sources, output_dir)
    typer.echo(f"{rows} rows from {len(sources)} directories in {output_dir}")


@app.command()
def score(
    task: str = typer.Option(..., help="Task name or task YAML path."),
    predictions: Path = typer.Option(
        ..., exists=False, help='JSONL: {"example_id": ..., "completion": ...} per line.'
    ),
    data: str = typer.Option("hub", help="hub, fixture, or a local jsonl/parquet file or folder."),
    split: Optional[str] = typer.Option(None, help="Dataset split (default: the task file's)."),
    output: Optional[Path] = typer.Option(
        None, help="Per-example scores (default: PREDICTIONS.scores.jsonl)."
    ),
    sandbox: str = typer.Option(
        "bwrap", help="Jail for generated code: bwrap, or guard (weaker; only where bwrap cannot run)."
    ),
) -> None:
    """Score completions made elsewhere with the task's metrics.

    Example: diversed-bench score --task gsm8k --data fixture --predictions preds.jsonl
    """
    from bench.sandbox import use_sandbox
    from bench.scoring import score_predictions

    use_sandbox(sandbox)

    out = output or predictions.with_suffix(".scores.jsonl")
    summary = score_predictions(task, data, predictions, out, split=split)
    typer.echo(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))
    typer.echo(f"per-example scores: {out}")


def main() -> None:
    """Entry point: user errors print one line, never a traceback."""
    try:
        app()
    except BenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
