"""The report snapshots' own machinery (tests/support/snapshots.py): what the normalised page keeps, what a
failure says, and the one way to refresh a snapshot."""

import pandas as pd
import pytest
from support.snapshots import UNRECORDED, UPDATE_ENV, assert_matches, describe, normalised_html, recording_charts

from pipeprof.render import plots

PAGE = ('<html><head><style>body { color: red; }</style></head>\n<body><p class="v">61,452 samples/s</p>\n'
        '<svg viewBox="0 0 648 201.6"><path d="M 0 0 L 1 1"/><text x="1">step</text><text>ms &amp; s</text></svg>\n'
        "</body></html>\n")


def test_the_page_keeps_its_markup_and_shows_each_chart_by_its_data_and_text():
    svg = PAGE[PAGE.index("<svg"):PAGE.index("</svg>") + 6]
    text = normalised_html(PAGE, {svg: ["chart step_breakdown_svg", "  phases: ['data_wait']"]})
    assert '<p class="v">61,452 samples/s</p>' in text
    assert "chart step_breakdown_svg\n  phases: ['data_wait']\n  shows: step | ms & s\n</svg>" in text
    assert "M 0 0" not in text and "color: red" not in text and "<style>sha256 " in text
    assert UNRECORDED in normalised_html(PAGE, {})  # an SVG no plotting function returned is marked


def test_a_chart_is_recorded_with_the_data_it_was_given():
    steps = pd.DataFrame({"step": [5, 6], "data_wait_s": [0.001, 0.003], "h2d_s": [0.0, 0.0],
                          "collective_wait_s": [0.0, 0.0], "compute_s": [0.002, 0.002], "other_s": [0.0, 0.001]})
    with recording_charts() as charts:
        svg = plots.step_breakdown_svg(steps, ["data_wait", "compute"])
    assert svg is not None
    assert charts[svg.strip()][:4] == ["chart step_breakdown_svg", "  breakdown:", "    table: 2 rows",
                                       "      collective_wait_s: min 0, max 0, sum 0"]
    assert "      data_wait_s: min 0.001, max 0.003, sum 0.004" in charts[svg.strip()]
    assert plots.step_breakdown_svg.__name__ == "step_breakdown_svg" and not hasattr(plots.step_breakdown_svg,
                                                                                      "__wrapped__")


def test_describe_rounds_numbers_names_text_columns_and_sorts_them():
    lines = describe({"t": pd.DataFrame({"x": [1 / 3, None, 2.0], "kind": ["b", "a", "b"]}), "n": 2})
    assert lines == ["t:", "  table: 3 rows", "    kind: 2 distinct (a, b)",
                     "    x: min 0.333333, max 2, sum 2.33333, 1 missing", "n: 2"]


def test_a_difference_fails_naming_the_run_and_its_first_differing_lines(tmp_path, monkeypatch):
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    snapshot = tmp_path / "run-a.report.txt"
    snapshot.write_text("".join(f"line {i}\n" for i in range(100)))
    changed = snapshot.read_text().replace("line 50\n", "line fifty\n")
    with pytest.raises(pytest.fail.Exception) as failed:
        assert_matches(snapshot, changed, "run-a: report.html")
    message = str(failed.value)
    assert message.startswith("run-a: report.html differs from its snapshot run-a.report.txt")
    assert "-line 50\n+line fifty" in message and UPDATE_ENV in message and "line 10\n" not in message
    assert_matches(snapshot, snapshot.read_text(), "run-a: report.html")  # the same text passes


def test_the_update_variable_rewrites_the_snapshot_and_a_missing_one_fails(tmp_path, monkeypatch):
    snapshot = tmp_path / "new" / "run-b.terminal.txt"
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="no snapshot"):
        assert_matches(snapshot, "text\n", "run-b")
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert_matches(snapshot, "text\n", "run-b")
    assert snapshot.read_text() == "text\n"
