"""Progress lines (bench/progress.py): one line per configuration off a terminal, naming the
configuration and its own decoding time."""

from bench.decode_stats import DecodeStats
from bench.config import RunSettings
from bench.grid import configs_from_flags
from bench.progress import Progress
from bench.runner import Runner


def test_progress_is_a_line_per_configuration_off_a_terminal(tmp_path):
    lines = []
    configs = configs_from_flags(
        tasks=["gsm8k"], pairs=["tiny"], methods=["ar", "sd"], device="cpu", settings=RunSettings(max_new_tokens=8)
    )
    Runner(tmp_path, limit=2, progress=True, log=lines.append).run(configs)
    assert len(lines) == 2 and all("2/2 examples" in line and "\r" not in line for line in lines)


def test_progress_names_the_configuration_and_its_own_time():
    logged: list[str] = []
    progress = Progress(
        2, "arith | ref | ensemble (w=0.2) | batch 1", logged.append, live=False, own_time=True
    )
    for seconds in (0.25, 0.5):
        progress.update(
            DecodeStats(
                prompt_tokens=3,
                draft_len=5,
                new_tokens=10,
                drafted_tokens=10,
                accepted_tokens=5,
                wall_time_s=seconds,
            )
        )
    progress.close()
    assert logged == [
        "arith | ref | ensemble (w=0.2) | batch 1: 2/2 examples in 0.8 s of its own decoding, acceptance "
        "0.500, 27 tokens/s"
    ]
