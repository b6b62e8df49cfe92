"""Generated reference for the docs site, so it cannot drift from the code.

A mkdocs hook (``hooks:`` in mkdocs.yml): on every page, the marker ``<!-- reference: COMMAND -->`` is replaced by
that subcommand's usage and options, read from ``pipeprof.cli.main.build_parser()``, and ``<!-- reference: summary
-->`` by the top-level keys of ``pipeprof/schemas/summary.schema.json``. ``python docs/gen_reference.py [NAME]``
prints the same markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeprof.cli.main import build_parser  # noqa: E402

SCHEMA = ROOT / "pipeprof" / "schemas" / "summary.schema.json"
MARKER = re.compile(r"<!--\s*reference:\s*([a-z][a-z0-9_-]*)\s*-->")  # lower case: a page may show `COMMAND`


def subparsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand of the ``pipeprof`` parser, by name, in the parser's order."""
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def command_reference(name: str) -> str:
    """Markdown for one subcommand: its usage and a table of its arguments and options."""
    parser = subparsers()[name]
    # argparse wraps at $COLUMNS: a fixed width here, so the page is the same from any terminal
    formatter = argparse.RawDescriptionHelpFormatter(prog=parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    usage = formatter.format_help().strip()
    lines = [f'<a id="reference-{name}"></a>', "", f"**Usage** (generated from `pipeprof {name} --help`):", "",
             "```text", usage, "```", "", "| argument | value | default | meaning |", "|---|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
        value = ""
        if action.option_strings and action.nargs != 0:
            metavar = formatter._format_args(action, action.dest.upper())
            value = f"`{metavar}`" if metavar else ""
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        meaning = formatter._expand_help(action) if action.help else ""
        lines.append(f"| {names} | {_cell(value)} | {_cell(shown)} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def _type_of(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
    kind = spec.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind:
        return str(kind)
    for key in ("oneOf", "anyOf"):
        if key in spec:
            return " or ".join(_type_of(s) for s in spec[key])
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[-1]
    if "const" in spec:
        return f"`{spec['const']}`"
    return "any"


def _fields(spec: dict[str, Any]) -> str:
    """The names of an object's own keys (or an array's items' keys), one level down."""
    for part in (spec, spec.get("items") or {}, *spec.get("oneOf", []), *spec.get("anyOf", [])):
        if isinstance(part, dict) and part.get("properties"):
            return ", ".join(f"`{name}`" for name in part["properties"])
    return ""


def summary_reference() -> str:
    """Markdown table of every top-level key of summary.json, from the published schema."""
    schema = json.loads(SCHEMA.read_text())
    required = set(schema.get("required", []))
    lines = ['<a id="reference-summary"></a>', "",
             "Generated from `pipeprof/schemas/summary.schema.json` "
             f"(draft `{schema.get('$schema', '?')}`):", "",
             "| key | type | always present | its keys | description |", "|---|---|---|---|---|"]
    for key, spec in schema.get("properties", {}).items():
        lines.append(f"| `{key}` | {_cell(_type_of(spec))} | {'yes' if key in required else 'no'} | "
                     f"{_cell(_fields(spec))} | {_cell(str(spec.get('description', '')))} |")
    return "\n".join(lines) + "\n"


def expand(markdown: str) -> str:
    """The page with every reference marker replaced by its generated markdown."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "summary":
            return summary_reference()
        if name not in subparsers():
            raise ValueError(f"no pipeprof subcommand {name!r} for a reference marker; known: "
                             f"{', '.join(subparsers())}")
        return command_reference(name)
    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook."""
    return expand(markdown)


if __name__ == "__main__":
    names = sys.argv[1:] or [*subparsers(), "summary"]
    print("\n".join(expand(f"<!-- reference: {n} -->") for n in names))
