"""The docs agree with the repository and the code: every command in scripts/ is cited by a docs
page (and named in docs/layout.md), every script anything cites exists, and docs/layout.md names
every folder of the top level and of bench/.

scripts/ holds only commands a page cites for what they make or measure; a one-off measurement
whose numbers no page shows any more leaves the tree (its page then names the commit that held it)."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
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
