"""The docs agree with the repository and the code: every command in scripts/ is cited by a docs
page (and named in docs/layout.md), every script anything cites exists, and docs/layout.md names
every folder of the top level and of bench/; tests/README.md names every test file and
anything cites only test files that exist; the numbers the code defines (the results schema,
the equivalence margins, run's defaults, the drafters' and the verifiers' defaults) are the docs'.

scripts/ holds only commands a page cites for what they make or measure; a one-off measurement
whose numbers no page shows any more leaves the tree (its page then names the commit that held it)."""

import dataclasses
import inspect
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LAYOUT = DOCS / "layout.md"
TEXT = {".py", ".sh", ".md", ".yaml", ".yml", ".json", ".toml"}
# A script in the tree; one removed is cited as `git show COMMIT:scripts/NAME`, which is not matched.
SCRIPT = re.compile(r"(?<![0-9a-f]:)scripts/([\w.-]+\.(?:py|sh))\b")


def _pages() -> list[Path]:
    """The pages a reader reads: README.md, docs/*.md, tests/README.md."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md")), REPO / "tests" / "README.md"]


def _citing() -> list[Path]:
    """Every text file that may name a script: the pages, the package, the tests, the scripts."""
    files = [p for folder in ("bench", "tests", "scripts") for p in sorted((REPO / folder).rglob("*"))]
    return [*_pages(), *(p for p in files if p.is_file() and p.suffix in TEXT)]


def scripts() -> list[str]:
    return sorted(p.name for p in (REPO / "scripts").iterdir() if p.is_file())


def test_every_script_is_cited_by_a_page_and_named_in_the_layout():
    assert scripts(), "no scripts/ folder found: the test would pass on nothing"
    cited = {m.group(1) for page in _pages() if page != LAYOUT for m in SCRIPT.finditer(page.read_text())}
    layout = LAYOUT.read_text()
    uncited = [name for name in scripts() if name not in cited]
    unnamed = [name for name in scripts() if not re.search(rf"(?<![\w.-]){re.escape(name)}", layout)]
    assert not uncited, f"scripts no page cites (cite each where its output is used, or remove it): {uncited}"
    assert not unnamed, f"scripts docs/layout.md does not name: {unnamed}"


def test_every_script_cited_exists():
    present = set(scripts())
    missing = sorted(
        f"{path.relative_to(REPO)}: scripts/{m.group(1)}"
        for path in _citing()
        for m in SCRIPT.finditer(path.read_text(errors="replace"))
        if m.group(1) not in present
    )
    assert not missing, "\n".join(missing)


def folders() -> list[str]:
    """The tracked folders docs/layout.md describes: the top level's and every one under bench/."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip(f"not a git checkout ({listed.stderr.strip()}): the folders are those of the tracked files")
    found = set()
    for name in listed.stdout.splitlines():
        parts = Path(name).parts[:-1]
        found |= {parts[0]} if parts else set()
        if parts[:1] == ("bench",):
            found |= {"/".join(parts[:n]) for n in range(2, len(parts) + 1)}
    return sorted(found)


def test_the_layout_names_every_folder():
    layout, tracked = LAYOUT.read_text(), folders()
    assert {"bench", "tests", "bench/reports"} <= set(tracked), tracked
    unnamed = [f for f in tracked if not re.search(rf"(?<![\w.-]){re.escape(Path(f).name)}/", layout)]
    assert not unnamed, f"folders docs/layout.md does not name (as NAME/): {unnamed}"


# --- numbers the code defines, as the docs give them ---------------------------------------------


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def facts() -> list[tuple[str, str, tuple]]:
    """(page, pattern, the code's values): every match of the pattern on the page must capture the
    code's values, and there must be one. Read here from the code, so a changed default fails until
    the page says the new one."""
    import typer

    from bench import api, runner, store
    from bench.cli import app
    from bench.config import RunConfig
    from bench.drafters import drafter_class
    from bench.lm_eval_model import DiversedLM
    from bench.reports import margins
    from bench.verifiers import verifier_class

    run = {p.name: p.default for p in typer.main.get_command(app).commands["run"].params}
    share, rouge, fidelity = margins.SHARE, margins.ROUGE, margins.DEFAULT_MARGINS[margins.FIDELITY]
    lookup, tree, suffix = (drafter_class(n) for n in ("lookup", "lookup_tree", "suffix"))
    lm_eval_draft_len = inspect.signature(DiversedLM.__init__).parameters["draft_len"].default
    return [
        ("docs/results-schema.md", r"writes schema (\d+)", (store.SCHEMA,)),
        ("docs/results-schema.md", r"read schemas (\d+) to (\d+)", (min(store.READ_SCHEMAS), max(store.READ_SCHEMAS))),
        ("docs/fidelity.md", r"schema (\d+) and older", (max(store.FULL_WINDOW_SCHEMAS),)),
        ("docs/compare.md", r"\(shares\) \| ([\d.]+) ", (share,)),
        ("docs/compare.md", r"ROUGE-1/2/L F1 x 100 \| ([\d.]+) \|", (rouge,)),
        ("docs/compare.md", r"nats per token\) \| ([\d.]+) \|", (fidelity,)),
        ("docs/cli.md", r"Defaults: ([\d.]+) for shares, ([\d.]+) for ROUGE x 100, ([\d.]+) for fidelity",
         (share, rouge, fidelity)),
        ("docs/spec.md", r"([\d.]+) nats per token by default", (fidelity,)),
        ("docs/recommend.md", r"([\d.]+) nats per token by default", (fidelity,)),
        ("README.md", r"within ([\d.]+) nats/token", (fidelity,)),
        ("docs/cli.md", r"Drafted tokens per round N \(default (\d+)\)", (_default(RunConfig, "draft_len"),)),
        ("docs/lm-eval.md", r"`draft_len` \| drafted tokens per round \(default (\d+)\)", (lm_eval_draft_len,)),
        ("docs/engines-and-timing.md", r"--batch-size B` \(default (\d+)\)", (api.DEFAULT_BATCH_SIZE,)),
        ("docs/cli.md", r"the grid's batch_size, else (\d+)\)", (api.DEFAULT_BATCH_SIZE,)),
        ("docs/engines-and-timing.md", r"\*\*warm-up\*\* decode of (\d+) tokens", (runner.WARMUP_TOKENS,)),
        ("docs/engines-and-timing.md", r"warm-up decodes (\d+) tokens", (runner.WARMUP_TOKENS,)),
        ("docs/engines-and-timing.md", r"`--timing-examples K` examples \(default (\d+)", (run["timing_examples"],)),
        ("docs/engines-and-timing.md", r"`--timing-repeats R` times \(default (\d+)", (run["timing_repeats"],)),
        ("docs/spec.md", r"`max_matching_ngram_size`, default (\d+)", (_default(lookup, "ngram"),)),
        ("docs/spec.md", r"`prompt_lookup_min`, default (\d+)", (_default(lookup, "min_ngram"),)),
        ("docs/spec.md", r"`matches` \(default (\d+)\)", (_default(tree, "matches"),)),
        *[
            ("docs/spec.md", rf"`{name}` \(([\d.]+)\)", (_default(suffix, name),))
            for name in ("max_tree_depth", "min_token_prob", "max_spec_factor", "max_spec_offset")
        ],
        ("docs/spec.md", r"`lenience` l \(([\d.]+)\)", (_default(verifier_class("lossy"), "lenience"),)),
        ("docs/spec.md", r"`cascade_rule` in [\w, ]+ \((\w+)\); `cascade_alpha` \(([\d.]+)\)",
         tuple(_default(verifier_class("cascade"), n) for n in ("cascade_rule", "cascade_alpha"))),
        ("docs/spec.md", r"`target_weight` w in \(0,1\] \(([\d.]+)\)", (_default(verifier_class("ensemble"), "target_weight"),)),
        ("docs/spec.md", r"`shift` \(([\d.]+)\)", (_default(verifier_class("diversed"), "shift"),)),
        ("docs/spec.md", r"`tau` in \[0, 1\] \(([\d.]+)\)", (_default(verifier_class("autojudge"), "tau"),)),
    ]  # fmt: skip


def _same(text: str, value: Any) -> bool:
    return text == value if isinstance(value, str) else float(text) == float(value)


def test_the_numbers_the_code_defines_are_the_docs_numbers():
    bad = []
    for page, pattern, values in facts():
        found = [m.groups() for m in re.finditer(pattern, (REPO / page).read_text())]
        if not found:
            bad.append(f"{page}: nothing matches {pattern!r} (the code says {values})")
        bad += [f"{page}: {g} where the code says {values}" for g in found
                if not all(map(_same, g, values))]  # fmt: skip
    assert not bad, "\n".join(bad)


def test_no_page_states_another_schema_as_the_current_one():
    from bench import store

    assert store.READ_SCHEMAS == tuple(range(min(store.READ_SCHEMAS), store.SCHEMA + 1))  # "3 to 6" says it
    current = re.compile(r"writes schema (\d+)|`bench\.store\.SCHEMA`[^)\n]*?(\d+)")
    stale = [
        f"{page.relative_to(REPO)}: {m.group(0)}"
        for page in _pages()
        for m in current.finditer(page.read_text())
        if int(m.group(1) or m.group(2)) != store.SCHEMA
    ]
    assert not stale, stale


# --- the test files, as the pages name them ------------------------------------------------------

TESTS = REPO / "tests"
TEST_PATH = re.compile(r"(?<![\w.-])tests/([\w/]+\.py)\b")
README_ROW = re.compile(r"`((?:[\w]+/)*test_\w+\.py)`")


def test_every_test_file_is_named_in_the_tests_readme_and_every_name_exists():
    files = {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    named = set(README_ROW.findall((TESTS / "README.md").read_text()))
    assert len(files) > 50, "the test files were not found"
    assert not files - named, f"test files tests/README.md does not name (by their path under tests/): {sorted(files - named)}"
    assert not named - files, f"tests/README.md names files that do not exist: {sorted(named - files)}"


def test_every_test_file_cited_exists():
    sources = [*_citing(), REPO / ".ci" / "run", REPO / ".ci" / "readme_commands", REPO / "pyproject.toml"]
    missing = sorted(
        f"{path.relative_to(REPO)}: tests/{m.group(1)}"
        for path in sources
        for m in TEST_PATH.finditer(path.read_text(errors="replace"))
        if not (TESTS / m.group(1)).is_file()
    )
    assert not missing, "\n".join(missing)
