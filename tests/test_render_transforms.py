"""Issue 18, item 3 (presentation): the report's "Inside the sample" chart and table per loader, the split line, and
the terminal's transforms line, formatted from summary.json's keys; nothing when nothing was timed."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from test_render import make_run

from pipeprof.pipeline.derive import summarize
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html
from pipeprof.render.transform_view import loader_views, ranked_parts, transforms_line

TRANSFORMS = [  # summary.json ``transforms``: costliest first
    {"name": "RandomAffine(degrees=15)", "per_sample_s": 1.2e-3, "cpu_per_sample_s": 1.1e-3, "calls": 4096,
     "share_of_prep": 0.78, "random": True},
    {"name": "Resize(size=64)", "per_sample_s": 0.2e-3, "cpu_per_sample_s": 0.19e-3, "calls": 4096,
     "share_of_prep": 0.13, "random": False},
    {"name": "Normalize", "per_sample_s": 50e-6, "cpu_per_sample_s": 48e-6, "calls": 4096, "share_of_prep": 0.0325,
     "random": False},
]
DECODE = {"per_sample_s": 0.3e-3, "cpu_per_sample_s": 0.28e-3, "calls": 4096, "how": "PIL.Image.open+convert"}
SPLIT = {"fetch_per_sample_s": 20e-6, "core_wait_per_sample_s": None, "decode_per_sample_s": 0.3e-3,
         "transform_per_sample_s": 1.45e-3, "other_per_sample_s": 15e-6}


@pytest.fixture(scope="module")
def plain() -> tuple:
    run = make_run()
    return run, summarize(run)


def with_transforms(summary: dict) -> dict:
    return {**summary, "transforms": TRANSFORMS, "decode": DECODE, "loading": {**(summary["loading"] or {}), "split": SPLIT}}


def section(html: str) -> str:
    start = html.index('id="transforms"')
    return html[start:html.index("<h2", start + 1)]


def test_decode_is_ranked_among_the_transforms_by_its_time_per_sample():
    names = [p.name for p in ranked_parts(TRANSFORMS, DECODE)]
    assert names == ["RandomAffine(degrees=15)", "decode (PIL.Image.open+convert)", "Resize(size=64)", "Normalize"]
    assert [p.name for p in ranked_parts(TRANSFORMS, None)] == [t["name"] for t in TRANSFORMS]


def test_the_report_shows_the_chart_and_the_table_in_rank_order(plain):
    run, summary = plain
    html = render_html(run, with_transforms(summary))
    part = section(html)
    assert len(re.findall(r"<svg\b", part)) == 1
    rows = re.findall(r'<tr><th scope="row"><code>([^<]+)</code></th><td class="n">([^<]+)</td><td class="n">([^<]+)</td>'
                      r'\s*<td class="n">([^<]+)</td><td class="n">([^<]+)</td><td>([^<]+)</td>', part)
    assert [r[0] for r in rows] == ["RandomAffine(degrees=15)", "decode (PIL.Image.open+convert)", "Resize(size=64)",
                                    "Normalize"]
    assert rows[0][1:] == ("1.20 ms", "1.10 ms", "4,096", "78%", "yes")
    assert rows[1][4:] == ("—", "decode")  # no share of prep is given for the decode calls: none is computed
    assert rows[3][1:] == ("50.0 µs", "48.0 µs", "4,096", "3.2%", "no")
    # the chart names each bar in the same order (matplotlib writes tick labels as text in the SVG comments)
    svg = part[part.index("<svg"):part.index("</svg>")]
    positions = [svg.find(name) for name in ("RandomAffine(degrees=15)", "PIL.Image.open+convert", "Resize(size=64)",
                                             "Normalize")]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert "fetch 20.0 µs · decode 300 µs · transform 1.45 ms · other 15.0 µs per sample" in part
    assert "waiting for a core" not in part.split("A sample's making:")[1].split("</p>")[0]  # unknown: not shown as 0


def test_the_page_with_transforms_stays_self_contained(plain):
    run, summary = plain
    html = render_html(run, with_transforms(summary))
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower() and "<link" not in html.lower() and "url(http" not in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # the chart's SVG ids prefixed, unique in the page


def test_nothing_renders_when_no_transforms_were_measured(plain):
    run, summary = plain
    assert summary.get("transforms") is None
    html = render_html(run, summary)
    assert 'id="transforms"' not in html and "Inside the sample" not in html
    assert loader_views(summary) == []
    assert transforms_line(summary) is None
    console = Console(record=True, width=200)
    print_summary(summary, "runs/x", console=console)
    assert "transforms" not in console.export_text()


def test_a_scripts_loaders_each_get_their_own_chart():
    loaders = [
        {"name": "train_loader", "role": "train", "number": 0, "transforms": TRANSFORMS[:2], "decode": None},
        {"name": "val_loader", "role": "eval", "number": 1, "transforms": TRANSFORMS[2:], "decode": DECODE},
        {"name": "val_loader", "role": "eval", "number": 2, "transforms": TRANSFORMS[2:], "decode": DECODE},
        {"name": "other", "role": "eval", "number": 3},  # nothing timed: no chart
    ]
    views = loader_views({"loaders": loaders, "transforms": TRANSFORMS[:2], "loading": {"split": SPLIT}})
    assert [v.title for v in views] == ["train_loader (train)", "val_loader (eval, the first of 2 loaders of that name)"]
    assert [p.name for p in views[1].parts] == ["decode (PIL.Image.open+convert)", "Normalize"]
    assert views[0].split == SPLIT and views[1].split is None  # the split is the training loader's


def test_the_terminal_shows_each_evaluation_loaders_transforms_apart(plain):
    _, summary = plain
    loaders = [
        {"name": "train_loader", "role": "train", "number": 0, "transforms": TRANSFORMS[:2], "decode": None},
        {"name": "val_loader", "role": "eval", "number": 1, "transforms": TRANSFORMS[2:], "decode": DECODE},
        {"name": "val_loader", "role": "eval", "number": 2, "transforms": TRANSFORMS[2:], "decode": DECODE},
        {"name": "other", "role": "eval", "number": 3},  # nothing timed: no line
    ]
    console = Console(record=True, width=250)
    print_summary({**with_transforms(summary), "loaders": loaders}, "runs/x", console=console)
    text = console.export_text()
    assert re.search(r"^transforms +RandomAffine", text, re.M)  # the training loader's, as before
    (line,) = [row.rstrip() for row in text.splitlines() if row.startswith("transforms, ")]
    assert re.match(r"transforms, val_loader \(eval\) +Normalize 50\.0 µs/sample \(3\.2% of prep\); "
                    r"decode \(PIL\.Image\.open\+convert\) 300 µs/sample$", line), line


def test_the_terminal_names_the_top_transforms_and_the_decode(plain):
    _, summary = plain
    line = transforms_line(with_transforms(summary))
    assert line == ("RandomAffine(degrees=15) 1.20 ms/sample (78% of prep), Resize(size=64) 200 µs, Normalize 50.0 µs; "
                    "decode (PIL.Image.open+convert) 300 µs/sample")
    console = Console(record=True, width=250)
    print_summary(with_transforms(summary), "runs/x", console=console)
    text = console.export_text()
    assert re.search(r"^transforms +RandomAffine\(degrees=15\) 1\.20 ms/sample \(78% of prep\)", text, re.M)
