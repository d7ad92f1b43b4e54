"""Shared fixtures. The hub is never reachable in tests: fail fast instead of hanging."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
if "PYTEST_XDIST_WORKER" in os.environ:
    # `pytest -n 2` on 2 cores: one thread per worker (and its subprocesses), not two each.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_pair():
    from bench.pairs import load_pair

    return load_pair("tiny", device="cpu")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real dataset slices beside the checkout; tests using them skip when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


def bench_cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python -m bench ARGS`` offline in a subprocess, capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or {**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def run_all(commands: list[list[str]], **kwargs) -> list[subprocess.CompletedProcess]:
    """``subprocess.run`` each of several independent commands, all at once: most of a short
    command's time is importing torch and transformers, which overlap on two cores."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda command: subprocess.run(command, **kwargs), commands))


def cli_error(*args: str) -> str:
    """The error a command stops with, run in-process (no interpreter start-up): ``bench.cli.main``
    prints it as ``error: MESSAGE`` and exits 2, so one line is a message without a newline."""
    from typer.testing import CliRunner

    from bench.cli import app
    from bench.errors import BenchError

    result = CliRunner().invoke(app, list(args))
    assert isinstance(result.exception, BenchError), result.output or repr(result.exception)
    message = str(result.exception)
    assert "\n" not in message, message
    return message


DEMO_EXAMPLES = 40  # enough for the verdicts of tests/reports/test_compare.py to hold with a wide margin


@pytest.fixture(scope="session")
def demo_results(tmp_path_factory) -> Path:
    """The demo grid's comparison on the shipped reference pair, traced: the static-ensemble
    weight sweep and the shipped DIVERSED head (ar, sd, lossy and cascade left out to keep it
    cheap), decoded once for the compare and report tests."""
    from bench import api
    from bench.grid import load_grid

    grid = load_grid("demo")
    out = tmp_path_factory.mktemp("demo") / "results"
    api.run(
        tasks=["arith"],
        pairs=["ref"],
        methods=["ensemble", "diversed"],
        params={"target_weight": grid["params"]["target_weight"]},
        heads=[grid["head"]],
        settings=api.RunSettings(seed=grid["seed"], draft_len=grid["draft_len"], temperature=grid["temperature"]),
        device="cpu",
        limit=DEMO_EXAMPLES,
        batch_size=DEMO_EXAMPLES,
        timing_examples=0,
        output_dir=out,
        progress=False,
        report=False,
        log=lambda m: None,
        trace=True,
        accept_all=False,  # the verdicts these tests read are on the sweep and the head alone
    )
    return out


@pytest.fixture(scope="session")
def smollm2():
    """The real smollm2 pair (fp32, CPU), loaded once per session or xdist worker. Where it was
    never fetched (no package index), the tests using it skip, naming the command that fetches
    it; a cache that exists but is wrong fails them."""
    from bench.fetch import MANIFEST, cache_dir, fetch_command
    from bench.pairs import load_pair

    if not (cache_dir("smollm2") / MANIFEST).is_file():
        pytest.skip(f"pair smollm2 is not fetched ({cache_dir('smollm2')}): run `{fetch_command('smollm2')}`")
    return load_pair("smollm2", device="cpu")


# The order `pytest -n 2` hands out. xdist gives tests to its workers in collection order, in
# chunks, the first a quarter of each worker's share at once. Alphabetically the longest modules
# came last, and one worker finished them alone while the other sat idle (74 s of a 6-min run on
# the shared 2-core machine; 1.5 min when it was busier). So the longest modules run first, longest
# first (their tests' durations summed, `--durations`, 2026-11-29: the compiled-engine modules had
# grown past the ones listed before), then the modules of many short tests (so that the first chunk
# holds no more than its share), then the rest, in their usual order. Whole modules move: module
# fixtures are still set up once a worker.
FIRST = (
    "test_fidelity.py",  # compiles three architectures: over 2 minutes
    "test_smollm2_fidelity.py",
    "test_compiled.py",
    "test_trees.py",
    "test_smollm2_acceptance.py",
    "test_runner.py",
    "test_distributed.py",
    "test_compile_output.py",
    "test_lookup.py",
    "test_sandbox_protocol.py",  # 140 tests, a few seconds in all
    "test_verifiers.py",
    "test_engine_verifiers.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="module")
def one_thread():
    """Compiling and tiny or single-row steps gain nothing from a second thread, and on a loaded
    machine two oversubscribed threads make each step many times slower. Correctness does not need them."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
