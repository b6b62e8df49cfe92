"""The README and the docs site: a short README, user docs without development history, and references generated
from the code (every command's options from its argparse parser, summary.json's keys from the schema), so they
cannot drift. When mkdocs is installed the whole site is built once here with ``--strict`` (a broken link, a page
left out of the navigation or a marker the generator does not know fails the build); ``make test`` runs it as
part of the suite and ``make docs`` builds the same site into ``site/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SCHEMA = ROOT / "pipeprof" / "schemas" / "summary.schema.json"

_SPEC = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
assert _SPEC is not None and _SPEC.loader is not None
gen_reference = importlib.util.module_from_spec(_SPEC)  # the mkdocs hook itself
_SPEC.loader.exec_module(gen_reference)


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines: move the detail into docs/"
    head = "\n".join(lines[:40])
    assert re.search(r"^make demo\b", head, re.MULTILINE), "`make demo` is not in the README's first 40 lines"
    assert re.search(r"^make test\b", head, re.MULTILINE), "`make test` is not in the README's first 40 lines"


def test_readme_links_point_at_files_that_exist() -> None:
    links = re.findall(r"\]\(((?:docs/|BENCHMARKS)[^)#]*)", README.read_text())
    assert links, "the README links into the docs"
    missing = [link for link in links if not (ROOT / link).is_file()]
    assert not missing, f"README links to missing files: {missing}"


def test_no_page_mentions_issue_numbers_or_development_stops() -> None:
    pattern = re.compile(r"\b(issue|stop)\s+#?\d+", re.IGNORECASE)
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in sorted(DOCS.rglob("*")) if path.suffix in (".md", ".py", ".yml")
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    hits += [f"README.md:{n}: {line.strip()}" for n, line in enumerate(README.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not hits, "development history in user docs:\n" + "\n".join(hits)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [opt for action in parser._actions if not isinstance(action, argparse._HelpAction)
            and action.help != argparse.SUPPRESS for opt in action.option_strings]


def test_every_subcommand_has_a_page_with_its_generated_reference() -> None:
    commands = gen_reference.subparsers()
    assert {"run", "profile", "compare", "attach"} <= set(commands)
    for name, parser in commands.items():
        page = DOCS / "commands" / f"{name}.md"
        assert page.is_file(), f"no docs page for `pipeprof {name}`"
        text = page.read_text()
        assert f"<!-- reference: {name} -->" in text, f"{page.name} has no generated reference marker"
        rendered = gen_reference.expand(text)
        assert "<!-- reference:" not in rendered
        assert f"pipeprof {name} " in rendered or rendered.count(f"pipeprof {name}\n") > 0
        for option in _options(parser):
            assert f"`{option}`" in rendered, f"`pipeprof {name} {option}` is missing from its generated reference"


def test_the_reference_follows_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """An option added to a command's parser appears in its page without anyone editing the page."""
    real = gen_reference.subparsers

    def with_new_option() -> dict[str, argparse.ArgumentParser]:
        parsers = real()
        parsers["list"].add_argument("--brand-new-flag", metavar="N", default=3, help="a new option (default: 3)")
        return parsers

    monkeypatch.setattr(gen_reference, "subparsers", with_new_option)
    rendered = gen_reference.expand("<!-- reference: list -->")
    row = next(line for line in rendered.splitlines() if "`--brand-new-flag`" in line)
    assert "`N`" in row and "`3`" in row and "a new option" in row
    with pytest.raises(ValueError, match="no pipeprof subcommand 'nosuch'"):
        gen_reference.expand("<!-- reference: nosuch -->")


def test_summary_page_lists_every_top_level_key_of_the_schema() -> None:
    keys = list(json.loads(SCHEMA.read_text())["properties"])
    text = (DOCS / "summary-json.md").read_text()
    assert "<!-- reference: summary -->" in text
    rendered = gen_reference.expand(text)
    missing = [key for key in keys if f"| `{key}` |" not in rendered]
    assert not missing, f"summary-json.md does not list: {missing}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
                    reason="mkdocs-material is not installed (pip install -e '.[docs]'): the site is not built")
def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    page = (site / "commands" / "run.html").read_text()
    assert "--verify" in page and "reference-run" in page
    assert (site / "img" / "report.png").is_file()
