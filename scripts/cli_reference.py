"""Write docs/cli.md from the typer app itself, so the CLI reference cannot drift from the code.

Run after changing a command: python scripts/cli_reference.py (a test fails until docs/cli.md
equals what this prints).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from bench.cli import app

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HEADER = """# CLI reference

Generated from the commands themselves by `python scripts/cli_reference.py`; `diversed-bench
COMMAND --help` prints the same. Folders are always `--output-dir`, a single file `--output`. Bad
input stops with one `error:` line naming the problem and the fix, exit code 2; Ctrl-C during
`run` prints what was saved and the command that resumes, exit code 130.
"""


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return f"`{param.opts[0] if param.default else param.secondary_opts[0]}`"
    value = param.default
    if value is None or value == "" or param.required:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(f"`{v}`" for v in value) if value else ""
    return f"`{value}`"


def _row(param: Any) -> str:
    if param.param_type_name == "argument":
        name = f"`{param.name.upper()}`" + ("" if param.required else " (optional)")
    else:
        name = " / ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    text = " ".join((getattr(param, "help", None) or "").split()).replace("|", "\\|")
    return f"| {name} | {text} | {_default(param)} |"


def reference() -> str:
    """The whole page: every command, its help text and every argument and option."""
    group = typer.main.get_command(app)
    parts = [HEADER]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        help_text = (command.help or "").strip()
        summary, _, rest = help_text.partition("\n\n")
        parts += [f"## `diversed-bench {name}`", "", " ".join(summary.split()), ""]
        examples: list[str] = []
        for paragraph in rest.split("\n\n"):
            lines = [line.strip() for line in paragraph.strip().splitlines() if line.strip()]
            if lines and all(line.startswith("Example:") for line in lines):
                examples += [line.split(":", 1)[1].strip() for line in lines]
            elif lines:
                parts += [" ".join(lines), ""]
        if examples:
            parts += ["```", *examples, "```", ""]
        params = [p for p in command.params if p.name != "help"]
        if params:
            parts += ["| argument / option | meaning | default |", "|---|---|---|"]
            parts += [_row(p) for p in params] + [""]
    return "\n".join(parts)


if __name__ == "__main__":
    DOC.write_text(reference())
    sys.stdout.write(f"wrote {DOC}\n")
