"""The Python API: what each command does, callable without the command line.

``cli.py`` parses flags and calls one function here, as lm-evaluation-harness's CLI calls
``simple_evaluate``. Tests and notebooks call the same functions::

    from bench import api
    api.run(grid="demo", output_dir="results")
    api.run(tasks=["gsm8k"], methods=["ar", "sd"], settings=api.RunSettings(temperature=0.0, draft_len=4))
    api.compare("results", candidates=["diversed"])
    api.recommend("results", quality_floor="0.98")
    api.report("results", "report.html", candidates=["diversed"])
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.config import RunConfig, RunSettings
from bench.errors import BenchError

if TYPE_CHECKING:
    from bench.distributed import Launch
    from bench.runner import Runner

Log = Callable[[str], None]

PAPER_TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")
# Examples decoded together unless --batch-size or the grid says otherwise.
DEFAULT_BATCH_SIZE = 16


def configs(
    *,
    grid: str | None = None,
    tasks: Sequence[str] | None = None,
    pairs: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    params: Mapping[str, Sequence[Any]] | None = None,
    heads: Sequence[str] = (),
    settings: RunSettings | Mapping[str, Any] = RunSettings(),
    sweep: bool = False,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    calibrate: bool | None = None,
    accept_all: bool = True,
    log: Log = print,
) -> tuple[list[RunConfig], int | None]:
    """The configurations a run decodes, from a grid or from flags, and the grid's example limit.
    ``settings``: a RunSettings (or a mapping of its fields, a name that is none refused here).
    With a grid, ``tasks``, ``pairs`` and ``methods`` fill what a template grid leaves open, and a
    setting the grid fixes is refused. ``sweep`` (no grid: a grid has its own key) gives every
    method the default sweep of its swept parameters. ``calibrate`` (None: the grid's choice, off
    without one) leaves calibrated families' values to `run` (bench.calibration). ``accept_all``
    adds the draft alone (``accept_all`` on each configuration's drafts) where none is there."""
    from bench.grid import configs_from_flags, configs_from_grid, with_accept_all

    settings = RunSettings.of(settings)
    anchor = with_accept_all if accept_all else list
    if grid:
        if sweep:
            raise BenchError(f"grid {grid} decides its sweep (its sweep key): drop sweep=True")
        found, limit = configs_from_grid(grid, device=device, dtype=dtype, engine=engine, tasks=tasks or (),
                                         pairs=pairs or (), candidates=methods or (), heads=heads, params=params,
                                         settings=settings, calibrate=calibrate)  # fmt: skip
        return anchor(found), limit
    chosen = _trained_or_given(list(methods or _default_methods()), heads, log)
    found = configs_from_flags(tasks=list(tasks or PAPER_TASKS), pairs=list(pairs or ["tiny"]), methods=chosen,
                               heads=heads, params=params, settings=settings, sweep=sweep,
                               calibrate=bool(calibrate), device=device, dtype=dtype, engine=engine)  # fmt: skip
    return anchor(found), None


def _default_methods() -> list[str]:
    """The methods a run that names none decodes: those whose class says so (``default_run``), in
    their order."""
    from bench.verifiers import VERIFIERS

    return [name for name, cls in sorted(VERIFIERS.items(), key=lambda kv: kv[1].order) if cls.default_run]


def _trained_or_given(chosen: list[str], heads: Sequence[str], log: Log) -> list[str]:
    """``chosen`` without the methods that read a head only `train` trains (``trains_in_run``
    False: DIVERSED's REINFORCE takes long) when no --head is given, each skip said with how to
    train one."""
    from bench.verifiers import verifier_class

    kept = []
    for name in chosen:
        cls = verifier_class(name)
        if cls.needs_hidden and not cls.trains_in_run and not heads:
            log(
                f"{cls.name}: skipped, no --head given. Train one with `diversed-bench train --method {cls.name} "
                "--task TASK --pair PAIR`, then pass --head PATH (or --head init for an untrained head)."
            )
            continue
        kept.append(name)
    return kept


@dataclass
class RunResult:
    output_dir: Path
    configs: list[RunConfig]
    rows_written: int
    table: str | None  # the printed table, when the run reported


def run(
    *,
    grid: str | None = None,
    tasks: Sequence[str] | None = None,
    pairs: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    params: Mapping[str, Sequence[Any]] | None = None,
    heads: Sequence[str] = (),
    settings: RunSettings | Mapping[str, Any] = RunSettings(),
    sweep: bool = False,
    limit: int | None = None,
    output_dir: Path | str = "results",
    plots_dir: Path | str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    shard: tuple[int, int] = (0, 1),
    batch_size: int | None = None,
    timing_examples: int = 4,
    timing_repeats: int = 2,
    progress: bool = True,
    trace: bool = False,
    report: bool = True,
    calibrate: bool | None = None,
    accept_all: bool = True,
    train_missing_heads: bool = True,
    threads: int | None = None,
    verbose: bool = False,
    log: Log = print,
) -> RunResult:
    """Decode every configuration's examples into ``output_dir`` (resuming what is there), then,
    unless ``report`` is off or this is one share of several, write the table and the plots.
    ``settings`` and ``sweep`` are `configs`'; ``train_missing_heads`` trains a learned family's
    head where none is cached (off: those families are skipped); ``accept_all`` (on by default)
    runs the draft alone beside every drafting configuration; ``threads``: CPU threads per
    operator (torch.set_num_threads), or the grid's ``threads`` key; neither: torch's own;
    ``batch_size``: examples decoded together, or the grid's ``batch_size`` key; neither: 16."""
    from bench.distributed import Launch

    _set_threads(threads, grid)
    batch_size = _grid_setting(grid, "batch_size", batch_size, "--batch-size") or DEFAULT_BATCH_SIZE
    found, grid_limit = configs(grid=grid, tasks=tasks, pairs=pairs, methods=methods, params=params, heads=heads,
                                settings=settings, sweep=sweep, device=device, dtype=dtype, engine=engine,
                                calibrate=calibrate, accept_all=accept_all, log=log)  # fmt: skip
    output_dir, launch = Path(output_dir), Launch.from_env(device)
    runner = _runner(output_dir, launch, shard, limit if limit is not None else grid_limit, batch_size=batch_size,
                     timing_examples=timing_examples, timing_repeats=timing_repeats, engine=engine,
                     progress=progress, trace=trace, verbose=verbose, log=log)  # fmt: skip
    found = _ready(found, runner, train_missing_heads, log)
    try:
        runner.run(found)
    except KeyboardInterrupt:
        raise Interrupted(output_dir, runner.store.rows_written) from None
    launch.finish()
    text = None
    if report and shard[1] == 1 and launch.rank == 0:
        text = table_and_plots(output_dir, Path(plots_dir) if plots_dir else output_dir / "plots", log=log)
    return RunResult(output_dir, found, runner.store.rows_written, text)


def _set_threads(threads: int | None, grid: str | None) -> None:
    """Set torch's CPU threads per operator to ``threads`` or the grid's ``threads`` (the demo's
    reference pair runs kernels too small to split: one thread decodes it several times faster,
    and a second thread waiting on a busy core stalls every step)."""
    import torch

    count = _grid_setting(grid, "threads", threads, "--threads")
    if count is not None:
        torch.set_num_threads(count)


def _grid_setting(grid: str | None, key: str, given: int | None, flag: str) -> int | None:
    """A run setting a grid may fix (``threads``, ``batch_size``): the grid's value, or ``given``
    (the flag's). A grid's value is fixed, as its other settings are: given again, it is refused."""
    from bench.grid import load_grid

    fixed = load_grid(grid).get(key) if grid else None
    if fixed is not None and given is not None:
        raise BenchError(f"grid {grid} sets {key}: {fixed}; drop {flag} (or copy the grid and change it)")
    count = given if fixed is None else fixed
    if count is None:
        return None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        where = f"grid {grid}: {key}" if fixed is not None else flag
        raise BenchError(f"{where} must be a positive integer, got {count!r}")
    return count


def _runner(
    output_dir: Path, launch: Launch, shard: tuple[int, int], limit: int | None, *, batch_size: int,
    timing_examples: int, timing_repeats: int, engine: str, progress: bool, trace: bool, verbose: bool, log: Log,
) -> Runner:  # fmt: skip
    """The runner of this process: share ``shard`` of the examples, split again among the
    launcher's ranks (one device each; only rank 0 shows progress)."""
    from bench.runner import Runner

    index, count = shard
    return Runner(
        output_dir,
        limit=limit,
        partition=(index * launch.world_size + launch.rank, count * launch.world_size),
        device=launch.device,
        batch_size=batch_size,
        timing_examples=timing_examples,
        timing_repeats=timing_repeats,
        engine=engine,
        progress=progress and launch.rank == 0,
        log=log,
        trace=trace,
        verbose=verbose,
    )


def _ready(found: list[RunConfig], runner: Runner, train_missing_heads: bool, log: Log) -> list[RunConfig]:
    """The configurations ready to decode: learned families given their cached heads (trained if
    missing, with the runner's pairs and engine, or skipped when ``train_missing_heads`` is off),
    calibrated families their values (searched with the runner too)."""
    from bench.calibration import calibrate as calibrate_sweeps, pending
    from bench.learned.cache import provide_heads

    found = provide_heads(found, runner if train_missing_heads else None, log)
    if any(map(pending, found)):
        found, runner.notes = calibrate_sweeps(found, runner, runner.limit, log=log)
    return found


class Interrupted(Exception):
    """A run stopped by Ctrl-C; every finished example is already on disk."""

    def __init__(self, output_dir: Path, rows_written: int) -> None:
        super().__init__(f"{output_dir}/ holds every finished example ({rows_written} written by this run)")
        self.output_dir, self.rows_written = output_dir, rows_written


def table_and_plots(results: Path | str, plots_dir: Path | str, fmt: str = "markdown", log: Log = print) -> str:
    """Write Table 1 and the figures of a results directory, as PNG (`plot` adds PDF and SVG: their
    font embedding was most of the demo's plotting time); return the table's text."""
    from bench.reports.plots import write_plots
    from bench.reports.summary import summarised
    from bench.reports.table import write_table

    read = summarised(Path(results))  # once for both: summarising bootstraps every configuration
    text, path = write_table(Path(results), fmt, read=read)
    log(text)
    log(f"table written to {path}")
    paths = write_plots(Path(results), Path(plots_dir), formats=("png",), read=read)
    log(f"{len(paths)} plot files written to {plots_dir}/: " + ", ".join(p.name for p in paths if p.suffix == ".png"))
    log(f"PDF and SVG of them: diversed-bench plot {results} --output-dir {plots_dir}")
    return text


def table(
    results: Path | str, fmt: str = "markdown", output: Path | str | None = None, margins: Sequence[str] = ()
) -> tuple[str, Path]:
    """Table 1 of a results directory as ``fmt`` (markdown, latex, csv), written to ``output``
    (RESULTS/table.md|tex|csv); ``margins``: ``NAME=VALUE`` over the defaults. Returns the text
    and the file."""
    from bench.reports.margins import Margins
    from bench.reports.table import write_table

    return write_table(Path(results), fmt, Path(output) if output else None, Margins.parse(margins))


def plot(results: Path | str, output_dir: Path | str | None = None, formats: Sequence[str] | None = None) -> list[Path]:
    """Every figure of a results directory (RESULTS/plots by default), as PNG, PDF and SVG unless
    ``formats`` says otherwise; returns the files written."""
    from bench.reports.plots import FORMATS, write_plots

    return write_plots(Path(results), Path(output_dir) if output_dir else Path(results) / "plots",
                       formats=tuple(formats) if formats else FORMATS)  # fmt: skip


def merge(sources: Sequence[Path | str], output_dir: Path | str) -> int:
    """Combine shards into one results directory (``bench.store.merge`` refuses shards that ran
    different settings); returns the rows written."""
    from bench.store import merge as merge_dirs

    return merge_dirs([Path(s) for s in sources], Path(output_dir))


def score(
    task: str, predictions: Path | str, *, data: str = "hub", split: str | None = None, output: Path | str | None = None
) -> tuple[dict[str, Any], Path]:
    """Score completions made elsewhere with ``task``'s metrics: per-example scores written to
    ``output`` (PREDICTIONS.scores.jsonl by default); returns the means and that file."""
    from bench.scoring import score_predictions

    out = Path(output) if output else Path(predictions).with_suffix(".scores.jsonl")
    return score_predictions(task, data, Path(predictions), out, split=split), out


def compare(
    results: Path | str, candidates: Sequence[str], fmt: str = "markdown", margins: Sequence[str] = ()
) -> str:
    """Every candidate's point and frontier verdicts against every baseline family, as text;
    ``margins``: ``NAME=VALUE`` equivalence margins over the defaults (bench.reports.margins)."""
    from bench.reports.compare_format import write_compare
    from bench.reports.margins import Margins

    return write_compare(Path(results), list(candidates), fmt, Margins.parse(margins))


def recommend(
    results: Path | str,
    quality_floor: str = "0.98",
    fmt: str = "markdown",
    margins: Sequence[str] = (),
    allow_off_distribution: bool = False,
) -> str:
    """Per task and panel, the setting to deploy under a quality floor, and how to run it, as text.
    A setting off the target's distribution (fidelity not equivalent to ar's within the fidelity
    margin) is deployed only with ``allow_off_distribution``."""
    from bench.reports.margins import Margins
    from bench.reports.recommend import write_recommend

    return write_recommend(Path(results), quality_floor, fmt, Margins.parse(margins), allow_off_distribution)


def report(
    results: Path | str,
    output: Path | str = "report.html",
    candidates: Sequence[str] = (),
    token_examples: int = 100,
    margins: Sequence[str] = (),
) -> Path:
    """One self-contained HTML page of a results directory."""
    from bench.reports.html import write_report
    from bench.reports.margins import Margins

    return write_report(Path(results), Path(output), list(candidates), token_examples, Margins.parse(margins))


@dataclass
class Generated:
    text: str
    prompt: str
    note: str  # where the prompt came from
    prompt_tokens: int
    dropped: int
    stats: Any


def generate(
    prompt: str | None = None,
    *,
    task: str | None = None,
    example: str | None = None,
    data: str | None = None,
    chat_template: bool = False,
    pair: str = "tiny",
    method: str = "sd",
    params: Mapping[str, Any] | None = None,
    head: str | None = None,
    draft_len: int = 5,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    truncate_prompt: str = "none",
    draft_policy: str | None = None,
    drafter: str = "model",
    verbose: bool = False,
) -> Generated:
    """Decode one prompt, raw or wrapped in a task's template, as ``run`` would."""
    from bench.build import build_decoder
    from bench.context import check_truncation, fit_prompt
    from bench.distributions import Sampling
    from bench.engines import make_engine
    from bench.pairs import encode_prompt, load_pair, resolve_pair

    text, note = generate_prompt(prompt, task, example, data, resolve_pair(pair).kind)
    check_truncation(truncate_prompt)
    factory = make_engine(engine, verbose, lambda m: print(m, file=sys.stderr))
    loaded = load_pair(pair, device=device, dtype=dtype)
    decoder = build_decoder(
        loaded,
        method,
        dict(params or {}),
        head=head,
        draft_len=draft_len,
        sampling=Sampling(temperature),
        engine=factory,
        draft_policy=draft_policy,
        drafter=drafter,
    )
    ids, dropped = fit_prompt(
        encode_prompt(loaded, text, chat_template),
        max_new_tokens,
        decoder.context,
        truncate_prompt,
        example="generate",
        bos_token_id=getattr(loaded.tokenizer, "bos_token_id", None),
    )
    gen = decoder.generate(ids, max_new_tokens, seed=seed)
    out = loaded.text(gen.token_ids)
    return Generated(out, text, note, len(ids), dropped, gen.stats)


def generate_prompt(
    prompt: str | None, task: str | None, example: str | None, data: str | None, pair_kind: str
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
        raise BenchError(f"with --task {spec.name}, give either a PROMPT or --example ID, not both or neither")
    text = bound.example(example).prompt if example is not None else bound.render_text(prompt or "")
    shots = f"{bound.spec.num_fewshot}-shot from {bound.data}" if bound.spec.num_fewshot else "0-shot"
    what = f"example {example}" if example is not None else "the text given"
    return text, f"task {spec.name}'s template around {what}, {shots}"


def train(
    *,
    task: str,
    pair: str = "tiny",
    method: str = "diversed",
    params: Mapping[str, Any] | None = None,
    data: str | None = None,
    output_dir: Path | str | None = None,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    verbose: bool = False,
    log: Log = print,
    **settings: Any,
) -> Path:
    """Train ``method``'s head (the recipe its verifier class declares; DIVERSED's by default) on
    ``task``'s train split, ``settings`` (`train`'s flags; None: the recipe's default) applied to
    the recipe; resumes from the folder's checkpoint. The folder defaults to heads/TASK-PAIR for
    DIVERSED and to the head cache for other methods. Returns the head's folder
    (bench.learned.train.train_head does the work)."""
    from bench.learned.train import train_head

    return train_head(
        task=task, pair=pair, method=method, params=params, data=data, output_dir=output_dir, device=device,
        dtype=dtype, engine=engine, verbose=verbose, log=log, **settings,
    )  # fmt: skip


def train_draft(
    *, out: Path | str, pair: str = "smollm2", prompts: Path | str | None = None, num_prompts: int | None = None,
    new_tokens: int = 128, gen_batch: int = 16, draft_vocab: int = 2048, steps: int = 200, batch: int = 8,
    ttt_steps: int = 7, lr: float = 1e-3, seed: int = 0, chat_template: bool = True, device: str = "cpu",
    dtype: str | None = None, features: Path | str | None = None, train_dtype: str = "float32", eval_every: int = 0,
    patience: int = 3, context: int = 0, export_now: bool = False, layers: int = 1, command: str = "", log: Log = print,
) -> dict[str, Any]:  # fmt: skip
    """Train an EAGLE-3 draft head for ``pair`` on the target's own greedy responses into ``out``
    (resuming every stage; bench.eagle.train does the work); returns its card, which records
    ``command``."""
    from bench.eagle.train import train_draft_command

    return train_draft_command(
        out=Path(out), pair=pair, prompts=Path(prompts) if prompts else None, num_prompts=num_prompts,
        new_tokens=new_tokens, gen_batch=gen_batch, draft_vocab=draft_vocab, steps=steps, batch=batch,
        ttt_steps=ttt_steps, lr=lr, seed=seed, chat_template=chat_template, device=device, dtype=dtype,
        features=Path(features) if features else None, train_dtype=train_dtype, eval_every=eval_every,
        patience=patience, context=context, export_now=export_now, layers=layers, command=command, log=log,
    )  # fmt: skip


def speed(
    *,
    pair: str = "tiny",
    draft_lens: Sequence[int] = (1, 3, 5, 8),
    methods: Sequence[str] = ("sd", "ensemble"),
    target_weight: float = 0.7,
    prompts: int = 8,
    max_new_tokens: int = 64,
    repeats: int = 3,
    device: str = "auto",
    dtype: str | None = None,
    engines: Sequence[str] = ("eager",),
    output_dir: Path | str = "results",
    command: str = "",
    verbose: bool = False,
    log: Log = print,
    drafter: str = "model",
    chat_template: bool = False,
    params: Mapping[str, Sequence[Any]] | None = None,
    temperature: float = 0.0,
    task: str = "cnndm",
    data: str = "fixture",
    num_fewshot: int | None = None,
    category: str | None = None,
) -> tuple[str, list[Path]]:
    """Time the harness against transformers' generate() and assisted generation (greedy, on the
    shipped CNN/DM fixture articles); return the markdown and the files written. With a lookup
    drafter, time it against ``ar`` and transformers' prompt lookup instead (``_speed_lookup``); with
    an EAGLE one, its head's steps against the target's and the bound beside sd (``_speed_eagle``)."""
    from bench.drafters import drafter_class, split_spec
    from bench.engines import make_engine
    from bench.pairs import load_pair
    from bench.speed.report import write
    from bench.speed.runs import fixture_prompts
    from bench.speed.steps import measure

    factories = {name: make_engine(name, verbose, log) for name in engines}
    if not factories:
        raise BenchError("--engine takes eager, compiled or eager,compiled")
    page = drafter_class(split_spec(drafter)[0]).speed  # how its class says it is timed (SPEED_PAGES)
    if page != "assisted":  # a task's prompts: an EAGLE head's steps, or the drafts of any other drafter
        on_task = _speed_eagle if page == "head" else _speed_lookup
        return on_task(
            pair=pair, draft_lens=draft_lens, methods=methods, prompts=prompts, max_new_tokens=max_new_tokens,
            repeats=repeats, device=device, dtype=dtype, engines=factories, output_dir=output_dir,
            command=command, log=log, drafter=drafter, chat_template=chat_template, params=params or {},
            temperature=temperature, task=task, data=data, num_fewshot=num_fewshot, category=category,
        )  # fmt: skip
    if params or temperature or (task, data, num_fewshot, category) != ("cnndm", "fixture", None, None):
        raise BenchError(
            "speed takes --param, --temperature, --task, --data, --num-fewshot and --category only with --drafter lookup (the draft-model "
            "comparison is greedy on the CNN/DM fixture and has --target-weight)"
        )
    if set(methods) - {"sd", "ensemble"} or "sd" not in methods:
        raise BenchError(f"--method takes sd or sd,ensemble, got {','.join(methods)!r}")
    loaded = load_pair(pair, device=device, dtype=dtype)
    encoded = fixture_prompts(loaded)[:prompts]
    weight = target_weight if "ensemble" in methods else None
    result = measure(loaded, encoded, list(draft_lens), max_new_tokens, repeats, weight, log=log, engines=factories)
    return write("speed", result, output_dir, command)


def _lookup_runs(
    methods: Sequence[str], params: Mapping[str, Sequence[Any]], task: str, pair: str, drafter: str,
    temperature: float,
) -> dict[str, tuple[str, dict[str, Any]]]:  # fmt: skip
    """Label -> (method, params) of every setting ``methods`` x ``params`` expands to; a rule the
    drafter cannot serve is refused here, before any model loads."""
    from bench.config import expand_methods

    runs = {}
    for m, p, _ in expand_methods(methods, params=params):
        if m == "ar":
            raise BenchError("speed --drafter lookup times ar as the baseline of every run: drop ar from --method")
        cfg = RunConfig(task=task, pair=pair, method=m, params=p, drafter=drafter, temperature=temperature).resolve()
        runs[cfg.info.label(p, digits=None)] = (m, p)  # the values as given: every digit
    return runs


def _speed_lookup(
    *, pair: str, draft_lens: Sequence[int], methods: Sequence[str], prompts: int, max_new_tokens: int,
    repeats: int, device: str, dtype: str | None, engines: Mapping[str, Any], output_dir: Path | str,
    command: str, log: Log, drafter: str, chat_template: bool, params: Mapping[str, Sequence[Any]],
    temperature: float, task: str, data: str, num_fewshot: int | None, category: str | None,
) -> tuple[str, list[Path]]:  # fmt: skip
    """``speed --drafter lookup``: one engine, the methods on lookup drafts against ar and
    transformers, each judged beside its speed; a table and a speed-against-fidelity plot.
    ``category`` times one category group of the task (Spec-Bench's ``summarization``); a
    multi-turn example is timed on its first turn only, as ``speed`` decodes one prompt each."""
    from bench.pairs import encode_prompt, load_pair
    from bench.speed.fidelity import Fidelity
    from bench.speed.lookup import measure_lookup
    from bench.speed.report import write

    if len(engines) != 1:
        raise BenchError("speed --drafter lookup times one engine: give one --engine")
    (engine,) = engines
    runs = _lookup_runs(methods, params, task, pair, drafter, temperature)
    source, examples = _speed_examples(task, data, num_fewshot, prompts, category, log)
    loaded = load_pair(pair, device=device, dtype=dtype)
    encoded = [encode_prompt(loaded, e.prompt, chat_template) for e in examples]
    result = measure_lookup(loaded, Fidelity(loaded, source, examples, encoded), list(draft_lens), max_new_tokens,
                            repeats, drafter, runs, engines[engine], log=log, temperature=temperature)  # fmt: skip
    result.update(engine=engine, chat_template=chat_template, task=task, data=data, num_fewshot=num_fewshot,
                  category=category)  # fmt: skip
    return write("speed_lookup", result, output_dir, command)



def _speed_examples(
    task: str, data: str, num_fewshot: int | None, prompts: int, category: str | None, log: Log
) -> tuple[Any, list[Any]]:
    """The task's source and its first ``prompts`` examples (of ``category``'s group when given)
    that a ``speed`` on a task's prompts times."""
    from bench.tasks import Task, resolve_task

    source = Task(resolve_task(task), data, num_fewshot=num_fewshot)
    examples = source.examples(prompts, categories=source.category_members(category) if category else None)
    if not examples:
        raise BenchError(f"task {task} ({data}) has no example in category group {category}")
    if any(e.follow_ups for e in examples):
        log("speed: multi-turn examples are timed on their first turn only")
    return source, examples


def _speed_eagle(
    *, pair: str, draft_lens: Sequence[int], methods: Sequence[str], prompts: int, max_new_tokens: int,
    repeats: int, device: str, dtype: str | None, engines: Mapping[str, Any], output_dir: Path | str,
    command: str, log: Log, drafter: str, chat_template: bool, params: Mapping[str, Sequence[Any]],
    temperature: float, task: str, data: str, num_fewshot: int | None, category: str | None,
) -> tuple[str, list[Path]]:  # fmt: skip
    """``speed --drafter eagle``: the head's chain steps timed against the target's on the task's
    first prompt, and lossless ``sd`` on its drafts against ``ar`` (``bench.speed.eagle``)."""
    from bench.distributions import Sampling
    from bench.drafters import canonical_drafter, parse_drafter
    from bench.pairs import encode_prompt, load_pair
    from bench.speed.eagle import measure_eagle
    from bench.speed.report import write

    if len(engines) != 1:
        raise BenchError("speed --drafter eagle times one engine: give one --engine (eager or compiled)")
    if list(methods) != ["sd"] or params:
        raise BenchError("speed --drafter eagle times lossless sd (the head's cost is the same under every rule): give --method sd and no --param")
    if parse_drafter(drafter)[1]["tree"]:
        raise BenchError("speed --drafter eagle times the head's chain steps; tree=1 is not timed here (run `run --drafter eagle:tree=1` with --timing-repeats)")
    _, examples = _speed_examples(task, data, num_fewshot, prompts, category, log)
    loaded = load_pair(pair, device=device, dtype=dtype)
    encoded = [encode_prompt(loaded, e.prompt, chat_template) for e in examples]
    (factory,) = engines.values()
    result = measure_eagle(loaded, encoded, list(draft_lens), max_new_tokens, repeats, canonical_drafter(drafter),
                           factory, Sampling(temperature), log=log)  # fmt: skip
    result.update(engine=next(iter(engines)), chat_template=chat_template, task=task, data=data,
                  num_fewshot=num_fewshot, category=category)  # fmt: skip
    return write("speed_eagle", result, output_dir, command)

def throughput(
    *,
    pair: str = "tiny",
    draft_len: int = 5,
    batch_sizes: Sequence[int] = (1, 4, 16, 64),
    examples: int = 64,
    max_new_tokens: int = 64,
    repeats: int = 3,
    device: str = "auto",
    dtype: str | None = None,
    engine: str = "eager",
    output_dir: Path | str = "results",
    command: str = "",
    verbose: bool = False,
    log: Log = print,
) -> tuple[str, list[Path]]:
    """Examples/s and tokens/s of ar and sd per batch size; every batch size must give batch 1's
    tokens. Returns the markdown and the files written."""
    from bench.engines import make_engine
    from bench.pairs import load_pair
    from bench.speed.report import write
    from bench.speed.runs import fixture_prompts
    from bench.speed.throughput import measure_throughput

    if examples < 1:
        raise BenchError(f"--examples must be >= 1, got {examples}")
    factory = make_engine(engine, verbose, log)
    loaded = load_pair(pair, device=device, dtype=dtype)
    articles = fixture_prompts(loaded)
    encoded = [list(articles[i % len(articles)]) for i in range(examples)]
    result = measure_throughput(
        loaded, encoded, list(batch_sizes), draft_len, max_new_tokens, repeats, log=log, engine=factory
    )
    return write("speed_throughput", result, output_dir, command)


def fetch(pair: str, *, wheel: Path | str | None = None, force: bool = False, log: Log = print) -> Path:
    """Fetch a ``fetched`` pair's target into the cache (``bench.fetch``) and return its folder."""
    from bench.fetch import FetchSource, fetch_model
    from bench.pairs import resolve_pair

    spec = resolve_pair(pair)
    if spec.kind != "fetched":
        raise BenchError(f"pair {spec.name} is a {spec.kind} pair; only fetched pairs are fetched")
    return fetch_model(spec.name, FetchSource.of(spec.name, spec.fetch), wheel=wheel, force=force, log=log)


def registries() -> str:
    """The tasks, pairs, methods (with their parameters, defaults and sweeps) and drafters (each
    class's help line and its parameters' defaults), as text."""
    from dataclasses import MISSING

    from bench.config import learns
    from bench.drafters import DRAFTERS
    from bench.pairs import pair_names, resolve_pair
    from bench.plugins import parameters
    from bench.tasks import resolve_task, task_names
    from bench.verifiers import VERIFIERS

    width = max(map(len, [*task_names(), *pair_names(), *VERIFIERS, *DRAFTERS])) + 2
    lines = ["tasks:"]
    for name in task_names():
        spec = resolve_task(name)
        source = spec.dataset.get("path") or spec.dataset.get("loader")
        lines.append(
            f"  {name:<{width}}{source} [{spec.dataset['split']}], {spec.num_fewshot}-shot, quality {spec.quality}"
        )
    lines.append("pairs:")
    for name in pair_names():
        pair = resolve_pair(name)
        what = {
            "hub": f"{pair.target} / {pair.draft}",
            "packaged": f"bench/{pair.target} / bench/{pair.draft}, shipped in the package, offline",
            "fetched": f"{pair.fetch.get('requirement')} (diversed-bench fetch {name}) / early-exit draft",
        }.get(pair.kind, "built in code, offline")
        lines.append(f"  {name:<{width}}{what}")
    lines.append("methods (the rule; the parameters' defaults; the fixed sweep and the calibration path of --grid baselines):")
    for name, cls in sorted(VERIFIERS.items(), key=lambda kv: kv[1].order):
        params = ", ".join(f"{f.name}={f.default}" for f in parameters(cls) if f.default is not MISSING)
        trains = cls.needs_hidden and learns(name, {})
        extra = (" (needs --head, or its cached head: trains it if missing)" if trains else " (needs --head)") if cls.needs_hidden else ""
        extra += " (drafts greedily)" if cls.uses_draft and cls.draft_policy == "greedy" else ""
        sweep = "; ".join(f"{k}={','.join(map(str, v))}" for k, v in cls.sweep.items())
        path = cls.calibration
        sweep = "; ".join(filter(None, [sweep, f"calibrated along {path.param} {path.floor:g} -> {path.top:g}" if path else ""]))
        lines.append(f"  {name:<{width}}{(cls.__doc__ or '').strip().splitlines()[0]}")
        lines.append(f"  {'':<{width}}{params or 'no parameters'}{extra}" + (f"; sweep {sweep}" if sweep else ""))
    lines.append("drafters (--drafter NAME[:key=value,...], or path/to/file.py:Class[:key=value,...]; N = --draft-len):")
    for name, drafter in DRAFTERS.items():
        params = ", ".join(f"{f.name}={f.default}" for f in parameters(drafter) if f.default is not MISSING)
        lines.append(f"  {name:<{width}}{drafter.help}")
        lines.append(f"  {'':<{width}}{params or 'no parameters'}")
    return "\n".join(lines)
