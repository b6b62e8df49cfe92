"""What a report contains is never run: user strings escaped in every page, nothing loaded from the network,
and writing never follows a symlink out of the reports folder."""

from __future__ import annotations

import json
import os
import re

import pytest

from pipeprof.analysis.compare import compare_runs
from pipeprof.cli.main import main
from pipeprof.pipeline.derive import summarize
from pipeprof.render.compare import render_compare_html
from pipeprof.render.html import render_html
from pipeprof.render.index import rebuild_index
from pipeprof.run_folder import new_run_folder, save_run, to_json
from tests.test_render import loading_run

HOSTILE = "<script>alert(1)</script>"
# A tag that opens a page's own script, style, image or frame from the network; or CSS that fetches.
NETWORK = re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//|@import|url\(\s*["']?(?:https?:)?//""",
                     re.IGNORECASE)


def hostile_run():
    run = loading_run()
    meta = run.meta
    meta["scenario"]["name"] = f"q{HOSTILE}"
    meta["scenario"]["description"] = f"desc {HOSTILE}"
    meta["overrides"] = [f"data.storage={HOSTILE}"]
    meta["scenario_file"] = f"/tmp/{HOSTILE}.toml"
    meta["notes"] = [f"note {HOSTILE}"]
    meta["absences"] = {"gpu": f"reason {HOSTILE}"}
    meta["status"], meta["error"] = "failed", f"ValueError: {HOSTILE}"
    return run


def script_run():
    run = hostile_run()
    run.meta.update({
        "kind": "script",
        "script": {"command_line": f"python train.py --name '{HOSTILE}'", "cwd": f"/home/{HOSTILE}",
                   "python": "/usr/bin/python3", "ended": {"how": "exception", "detail": f"RuntimeError: {HOSTILE}"}},
        "loaders": [{"name": f"self.{HOSTILE}", "role": "train", "dataset": HOSTILE, "batches": 3}],
        "step_source": "optimizer",
    })
    return run


def assert_escaped(html: str, *, expected: int = 1) -> None:
    assert HOSTILE not in html  # never as markup
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= expected  # but shown, as text
    assert not NETWORK.search(html), NETWORK.search(html).group(0)


@pytest.mark.parametrize("make", [hostile_run, script_run])
def test_report_escapes_every_user_string_and_loads_nothing(make):
    run = make()
    html = render_html(run, summarize(run), folder_name=f"folder{HOSTILE}")
    assert_escaped(html, expected=5)
    benign = loading_run()
    own = render_html(benign, summarize(benign), folder_name="folder").count("<script")
    assert html.count("<script") == own  # only the page's own inline scripts


def test_comparison_and_index_escape_user_strings(tmp_path):
    folders = []
    for i in range(2):
        run = hostile_run()
        folder = new_run_folder(tmp_path, f"run{i}")
        summary = summarize(run)
        save_run(run, folder, {"summary.json": to_json(summary)})
        folders.append(folder)
    runs = [hostile_run() for _ in folders]
    compare = compare_runs([(f"run{i}{HOSTILE}", str(f), r, summarize(r)) for i, (f, r) in enumerate(zip(folders, runs))])
    assert_escaped(render_compare_html(compare, folder_name=HOSTILE))
    index = rebuild_index(tmp_path).read_text()
    assert_escaped(index)


def test_config_strings_stay_data(tmp_path):
    marker = tmp_path / "pwned"
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'name = "x"\ndescription = "__import__(\'os\').system(\'touch {marker}\') $(id) {{{{7*7}}}}"\n'
                        '[train]\nsteps = 50\n')
    from pipeprof.scenario import load_scenario
    loaded = load_scenario(scenario, [])
    assert "__import__" in loaded.description and "{{7*7}}" in loaded.description
    assert not marker.exists()


def test_writing_never_follows_a_symlink_out_of_the_reports_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.json"
    victim.write_text("keep me")
    reports = tmp_path / "reports"
    reports.mkdir()
    run = loading_run()
    folder = new_run_folder(reports, "quick")
    save_run(run, folder, {"summary.json": to_json(summarize(run))})
    # summary.json replaced by a link to a file outside: re-rendering replaces the link, not the file.
    (folder / "summary.json").unlink()
    (folder / "summary.json").symlink_to(victim)
    (reports / "index.html").symlink_to(outside / "index.html")
    assert main(["report", str(folder), "--quiet"]) == 0
    assert victim.read_text() == "keep me"
    assert not (folder / "summary.json").is_symlink() and json.loads((folder / "summary.json").read_text())["steps"]
    assert not (outside / "index.html").exists() and not (reports / "index.html").is_symlink()
    # A run folder name taken by a (dangling) link is skipped, never written through.
    taken = new_run_folder(reports, "quick")
    taken.symlink_to(outside / "elsewhere")
    assert new_run_folder(reports, "quick") != taken
    save_run(run, new_run_folder(reports, "quick"))
    assert not (outside / "elsewhere").exists()
    assert sorted(os.listdir(outside)) == ["victim.json"]
