"""The docs hold together: every citation of a docs page from the code, the registries and the docs
themselves names a page and a heading that exist, the links between docs pages resolve, docs/cli.md
is generated from the app, and no page carries development history.

Code cites the specification as ``docs/spec.md §N, <section title>`` and any page as
``docs/<page>.md#<anchor>``; anchors are GitHub's (lower case, punctuation dropped, spaces to hyphens)."""

import re
from pathlib import Path

import pytest

from bench.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CITING = ["bench", "pairs", "tasks", "docs", "scripts", "tests"]  # where citations are looked for
TEXT = {".py", ".yaml", ".yml", ".md", ".txt", ".toml", ".cfg"}

PAGE = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
SECTION = re.compile(r"docs/spec\.md §(\d+)(?:,\s*([^\n]*(?:\n[^\n]*)?))?")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _sources() -> list[Path]:
    files = []
    for folder in CITING:
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.is_file() and p.suffix in TEXT]
    return files


def _prose(text: str) -> str:
    """A markdown page without its fenced code blocks (a ``#`` there is a shell comment)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def _slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def headings(page: Path) -> list[str]:
    return [m.group(2) for line in _prose(page.read_text()).splitlines() if (m := HEADING.match(line))]


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    for heading in headings(page):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def spec_sections() -> dict[str, str]:
    """``{"3": "the decoding loop", ...}`` from the spec's ``## 3. The decoding loop`` headings."""
    return {
        m.group(1): m.group(2).lower()
        for h in headings(DOCS / "spec.md")
        if (m := re.match(r"(\d+)\. (.+)", h))
    }


def _flat(text: str) -> list[str]:
    """A citation's words with comment markers and line breaks folded into single spaces."""
    return " ".join(re.sub(r"^\s*#+", " ", line) for line in text.splitlines()).split()


def test_every_page_citation_names_an_existing_page_and_heading():
    bad = []
    for path in _sources():
        for m in PAGE.finditer(path.read_text(errors="replace")):
            page, anchor = DOCS / m.group(1), m.group(2)
            where = f"{path.relative_to(REPO)}: {m.group(0)}"
            if not page.is_file():
                bad.append(f"{where} (no such page)")
            elif anchor and anchor not in anchors(page):
                bad.append(f"{where} (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_spec_section_citation_names_an_existing_section_by_its_title():
    sections, bad, cited = spec_sections(), [], 0
    assert [int(n) for n in sections] == list(range(1, len(sections) + 1)), sections
    for path in _sources():
        for m in SECTION.finditer(path.read_text(errors="replace")):
            cited += 1
            number, rest = m.group(1), m.group(2)
            where = f"{path.relative_to(REPO)}: {' '.join(_flat(m.group(0)))[:80]}"
            if number not in sections:
                bad.append(f"{where} (no section {number})")
            elif rest is not None and not " ".join(_flat(rest)).lower().startswith(sections[number]):
                bad.append(f"{where} (section {number} is '{sections[number]}')")
    assert not bad, "\n".join(bad)
    assert cited >= 10  # the code does cite the spec; a pattern that matched nothing would pass


def test_no_citation_of_the_old_out_of_tree_spec_remains():
    old = re.compile(r"\bSPEC" + r"( section|\.md| §)")
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for path in _sources()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if old.search(line)
    ]
    assert not found, found


PAGES = [*sorted(DOCS.glob("*.md")), REPO / "tests" / "README.md"]  # the pages whose links are checked


def _links(page: Path):
    for m in LINK.finditer(_prose(page.read_text())):
        target = m.group(1)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked
            yield target


@pytest.mark.parametrize("page", [str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_between_docs_pages_resolve(page):
    bad, source = [], REPO / page
    for target in _links(source):
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            bad.append(f"{target} (no such heading in {resolved.name})")
    assert not bad, f"{page}: " + ", ".join(bad)


def test_the_anchor_rules_are_githubs():
    assert _slug("3. The decoding loop") == "3-the-decoding-loop"
    assert _slug("8. The authors' mistakes") == "8-the-authors-mistakes"
    assert _slug("`diversed-bench run`") == "diversed-bench-run"
    assert _slug("Notation (used everywhere in these docs, the table and the plots)") == (
        "notation-used-everywhere-in-these-docs-the-table-and-the-plots"
    )


# --- the docs agree with the code ----------------------------------------------------------------


def test_cli_reference_is_generated_from_the_app_and_names_every_option():
    import importlib.util

    import typer

    spec = importlib.util.spec_from_file_location("cli_reference", REPO / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (REPO / "docs" / "cli.md").read_text()
    assert page == module.reference(), "docs/cli.md is stale: run python scripts/cli_reference.py"
    for name, command in typer.main.get_command(app).commands.items():
        section = page.split(f"## `diversed-bench {name}`", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                assert (f"`{opt}`" if opt.startswith("-") else f"`{opt.upper()}`") in section, (name, opt)


def test_docs_carry_no_development_history():
    import re

    history = re.compile(r"\bissues? \d|\bPR \d|available to this work|\bno longer\b|used to be")
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        found = history.search(page.read_text())
        assert found is None, (page.name, found and found.group())
    assert len((REPO / "README.md").read_text().splitlines()) <= 250
