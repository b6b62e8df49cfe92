"""A job of ranks on the page, in the terminal and in the Chrome trace, on a synthetic 2-rank job.

Rank 1 waits 80 ms a step for its data; rank 0 waits for it 75 ms a step in the gradient all-reduce. The
job's summary is ``summarize``'s: the median rank's (rank 0, the lower middle of two) with ``ranks`` and
``straggler`` (analysis.ranks); a few cases give the renderers a straggler written here.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape
from rich.console import Console
from support.profiled import STRAGGLER_JOB

from pipeprof.analysis.compare import compare_runs
from pipeprof.analysis.steps import counted_steps
from pipeprof.cli.main import main
from pipeprof.pipeline.derive import summarize
from pipeprof.render import plots
from pipeprof.render.compare import compare_table, render_compare_html
from pipeprof.render.compare import shown_phases as compare_phases
from pipeprof.render.console import print_summary
from pipeprof.render.html import render_html, shown_phases
from pipeprof.render.ranks import evidence_label, evidence_text, rank_rows, straggler_line, straggler_view
from pipeprof.render.sweep import shown_phases as sweep_phases
from pipeprof.render.trace import chrome_trace
from pipeprof.run_folder import LOADING_COLUMNS, PROCESS_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, Run, save_run

NODE = "node-a"
PIDS = {0: 7100, 1: 7200}
N_STEPS, WARMUP = 30, 3


def rank_steps(data_wait_s: float, collective_wait_s: float, compute_s: float = 0.02) -> pd.DataFrame:
    step_s = data_wait_s + collective_wait_s + compute_s + 0.005
    step = np.arange(N_STEPS)
    return pd.DataFrame({
        "step": step, "epoch": 0, "warmup": step < WARMUP, "t_start_s": 0.5 + step * step_s,
        "data_wait_s": data_wait_s, "h2d_s": 0.0, "compute_s": compute_s, "step_s": step_s,
        "host_wait_s": data_wait_s, "samples": 16, "loss": 1.0, "correct": 8, "ready_batches": np.nan,
        "collective_wait_s": collective_wait_s,
    })[STEP_COLUMNS]


def rank_loading(pid: int, fetch_s: float, workers: int = 2) -> pd.DataFrame:
    step = np.arange(N_STEPS)
    start = 0.45 + step * 0.1
    return pd.DataFrame({
        "batch": step, "step": step, "worker": step % workers, "pid": pid + 1 + step % workers,
        "t_start_s": start, "t_end_s": start + 0.09, "fetch_s": fetch_s, "prep_s": 0.004, "collate_s": 0.001,
        "samples": 16, "nbytes": 16 * 100, "fetch_max_s": fetch_s / 16,
    }).reindex(columns=LOADING_COLUMNS)


def rank_run(rank: int, data_wait_s: float, collective_wait_s: float, fetch_s: float) -> Run:
    pid = PIDS[rank]
    t = np.linspace(0.0, 3.0, 10)
    samples = pd.DataFrame({"t_s": t, "cpu_util_pct": 50.0, "main_cpu_pct": 90.0 + rank, "workers_cpu_pct": 40.0,
                            "main_rss_bytes": 2**28, "workers_rss_bytes": 2**28, "tree_rss_bytes": 2**29,
                            "workers": 2, "read_bytes_per_s": 0.0})[SAMPLE_COLUMNS]
    processes = pd.DataFrame([(0.5, pid, "main", 90.0, 2**28, 0, np.nan),
                              (0.5, pid + 1, "worker", 40.0, 2**27, 0, np.nan)], columns=PROCESS_COLUMNS)
    meta = {"status": "complete", "device": "cpu", "scenario": {"name": "ddp"},
            "rank": {"rank": rank, "local_rank": rank, "world_size": 2, "node": NODE, "node_rank": 0, "pid": pid,
                     "backend": "gloo", "status": "complete", "error": None}}
    return Run(meta=meta, steps=rank_steps(data_wait_s, collective_wait_s), samples=samples, processes=processes,
               loading=rank_loading(pid, fetch_s))


def job_run() -> Run:
    """Rank 1's data is slow (80 ms a step); rank 0 waits for it in the all-reduce (75 ms a step)."""
    ranks = [rank_run(0, 0.002, 0.075, fetch_s=0.01), rank_run(1, 0.08, 0.0005, fetch_s=1.2)]
    median = ranks[0]
    meta = {**median.meta, "job": {"id": "localhost:29500", "world_size": 2, "ranks": [0, 1], "nodes": [NODE],
                                   "launcher": "torchrun", "median_rank": 0, "untraced": []}}
    meta.pop("rank")
    return Run(meta=meta, steps=median.steps.copy(), loading=median.loading.copy(), samples=median.samples.copy(),
               processes=pd.DataFrame([(0.5, 7000, "main", 1.0, 2**26, 0, np.nan)], columns=PROCESS_COLUMNS),
               ranks=ranks)


@pytest.fixture(scope="module")
def job() -> tuple[Run, dict, str]:
    run = job_run()
    summary = summarize(run)
    assert summary["straggler"]["rank"] == 1 and [r["rank"] for r in summary["ranks"]] == [0, 1]
    return run, summary, render_html(run, summary, folder_name="ddp-job")


# -- the report ----------------------------------------------------------------


def test_the_straggler_is_named_at_the_top_with_its_evidence(job):
    _, summary, html = job
    top = html[: html.index('id="recommendations"') if 'id="recommendations"' in html else html.index("Key numbers")]
    box = top.split('id="straggler"', 1)[1].split("</section>", 1)[0]
    assert "straggler-input" in top
    assert re.search(r'id="straggler-title">Straggler: rank 1 \(node-a\), input-bound<', box)
    assert str(escape(summary["straggler"]["sentence"])) in box  # the analysis' sentence, verbatim
    assert "80.0 ms of it waiting for data" in box
    # per-rank evidence in words: own time per step (step less collective wait) 2 + 20 + 5 ms, 80 + 20 + 5 ms
    assert "own step, by rank" in box and "rank 0 27.0 ms · rank 1 105 ms" in box
    assert "75.8%" in box and "73.5%" in box  # rank 1's data wait, rank 0's collective wait
    assert "median rank's (rank 0)" in box
    assert top.index('id="verdict"') < top.index('id="straggler"')  # next to the verdict, after it


def test_the_ranks_table_has_a_row_per_rank_with_its_fractions_and_loading(job):
    _, summary, html = job
    table = html.split('id="ranks-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr class="rank-row[^"]*" id="rank-(\d+)">(.*?)</tr>', table, re.S)
    assert [r for r, _ in rows] == ["0", "1"]
    zero, one = (re.sub(r"\s+", " ", text) for _, text in rows)
    f0, f1 = summary["ranks"][0]["fractions"], summary["ranks"][1]["fractions"]
    assert f"{100 * f0['collective_wait']:.1f}%" in zero and f"{100 * f1['data_wait']:.1f}%" in one
    assert f0["collective_wait"] > 0.7 and f1["data_wait"] > 0.7
    assert "median" in zero and "straggler" in one and "straggler" not in zero
    assert 'class="rank-row straggler"' in table
    # fetch per sample: 10 ms / 16 samples on rank 0, 1.2 s / 16 on rank 1
    assert "625 µs" in zero and "75.0 ms" in one
    assert summary["ranks"][1]["verdict"]["class"] in one
    assert NODE in zero


def test_the_rank_by_step_heatmap_is_inline(job):
    _, _, html = job
    figure = html.split('id="plot-ranks"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" in figure and "<image" in figure  # the heatmaps, a raster inside the SVG
    assert "data:image/png;base64," in figure
    assert "rank 0 (node-a)" in figure and "rank 1 (node-a)" in figure  # the rows' labels
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_the_heatmap_rows_are_the_ranks_waits():
    run = job_run()
    labelled = [(f"rank {i}", counted_steps(r.steps)) for i, r in enumerate(run.ranks)]
    assert plots.rank_heatmap_svg(labelled) is not None
    assert plots.rank_heatmap_svg([]) is None
    assert plots.rank_heatmap_svg([("rank 0", counted_steps(run.ranks[0].steps).iloc[0:0])]) is None
    # a run of more steps than MAX_POINTS is binned, not drawn a column per step
    long = run.ranks[0].steps.loc[np.repeat(np.arange(N_STEPS), 50)].reset_index(drop=True)
    long["step"] = np.arange(len(long))
    svg = plots.rank_heatmap_svg([("rank 0", counted_steps(long))])
    assert svg is not None and "bins" in svg


def test_collective_wait_is_listed_for_a_job_and_not_for_one_process(job):
    run, _, html = job
    bar = html.split('aria-label="Where step time goes"', 1)[1].split("</section>", 1)[0]
    assert "collective wait" in bar
    steps_plot = html.split('id="plot-steps"', 1)[1].split("</figure>", 1)[0]
    assert "collective wait" in steps_plot
    single = rank_run(0, 0.03, 0.0, fetch_s=0.01)
    single.meta.pop("rank")
    summary = summarize(single)
    assert summary["fractions"]["collective_wait"] == 0.0
    assert "collective_wait" not in shown_phases(single, summary)
    page = render_html(single, summary)
    assert "collective wait" not in page
    assert 'id="ranks"' not in page and 'id="straggler"' not in page


def test_a_job_without_a_straggler_says_the_ranks_kept_pace():
    run = job_run()
    run.ranks = [rank_run(0, 0.03, 0.001, fetch_s=0.4), rank_run(1, 0.03, 0.001, fetch_s=0.4)]
    summary = summarize(run)
    assert summary["straggler"]["kind"] == "none"
    html = render_html(run, summary)
    box = html.split('id="straggler"', 1)[1].split("</section>", 1)[0]
    assert "No straggler: the ranks kept pace" in box and "straggler-none" in html
    assert str(escape(summary["straggler"]["sentence"])) in box and "own work per step is within" in box
    assert 'class="rank-row straggler"' not in html
    assert straggler_line(summary) == f"none: {straggler_view(summary)['sentence']}"
    assert straggler_line(summary).startswith("none: No rank sets the pace")


def test_straggler_words():
    assert straggler_view({}) is None and straggler_line({"ranks": []}) is None
    view = straggler_view({"straggler": {"rank": 3, "node": None, "kind": "compute", "evidence": {}}})
    assert view["title"] == "Straggler: rank 3, compute-bound"
    assert "computes slower" in view["sentence"]
    assert evidence_label("data_wait_fraction") == "data wait, share"
    assert evidence_label("own_step_s") == "own step"
    assert evidence_text("own_step_s", [0.1, 0.25]) == "rank 0 100 ms · rank 1 250 ms"
    assert evidence_label("own_step_s_by_rank") == "own step, by rank"
    assert evidence_text("own_step_s_by_rank", {"0": 0.1, "1": 0.25}) == "rank 0 100 ms · rank 1 250 ms"
    alone = straggler_view({"straggler": {"rank": None, "kind": "none", "evidence": {"ranks_compared": 1},
                                          "sentence": "No straggler to name: 1 rank."}})
    assert alone["title"] == "No straggler named" and alone["sentence"] == "No straggler to name: 1 rank."
    assert evidence_text("x_fraction", None) == "not measured"
    rows = rank_rows({"ranks": [{"rank": 0, "node": "n", "verdict": {}}], "straggler": {"rank": None}})
    assert rows[0]["straggler"] is False and rows[0]["fractions"]["collective_wait"] is None


# -- the terminal ----------------------------------------------------------------


def test_the_console_names_the_straggler(job):
    _, summary, _ = job
    console = Console(record=True, width=200)
    print_summary(summary, "runs/ddp", console=console)
    text = console.export_text()
    [line] = [x for x in text.splitlines() if x.startswith("straggler")]
    assert line.startswith("straggler") and "rank 1 (node-a), input: Rank 1 (node node-a) sets the job" in line
    assert "collective wait (share of step time)" in text


def test_the_console_of_one_process_has_no_straggler_or_collective_row():
    single = rank_run(0, 0.03, 0.0, fetch_s=0.01)
    single.meta.pop("rank")
    console = Console(record=True, width=200)
    print_summary(summarize(single), "runs/one", console=console)
    text = console.export_text()
    assert "straggler" not in text and "collective" not in text


# -- the trace -------------------------------------------------------------------


def _processes(trace: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


def test_the_trace_has_a_process_per_rank_with_its_pid_name_steps_and_workers():
    run = job_run()
    trace = chrome_trace(run)
    names = _processes(trace)
    assert names[PIDS[0]] == "rank 0 (node-a)" and names[PIDS[1]] == "rank 1 (node-a)"
    for rank, pid in PIDS.items():
        steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid and e["tid"] == 1]
        assert len(steps) == N_STEPS
        for k in (0, 1):  # its workers: processes of their own, named for the rank
            assert names[pid + 1 + k] == f"rank {rank} worker {k}"
    waits = [e for e in trace["traceEvents"] if e["name"] == "collective wait"]
    assert {e["pid"] for e in waits} == {PIDS[0], PIDS[1]}
    assert waits[0]["dur"] == pytest.approx(75_000 if waits[0]["pid"] == PIDS[0] else 500)
    assert names[7000] == "job (node where pipeprof ran)"  # the node's samples, once
    assert not [e for e in trace["traceEvents"] if e["pid"] == 7000 and e["ph"] == "X"]
    assert trace["metadata"]["world_size"] == 2 and trace["metadata"]["job"] == "localhost:29500"
    sorts = {e["pid"]: e["args"]["sort_index"] for e in trace["traceEvents"] if e["name"] == "process_sort_index"}
    assert sorts[PIDS[0]] < sorts[PIDS[0] + 1] < sorts[PIDS[1]] < sorts[PIDS[1] + 1]


def test_ranks_of_one_pid_on_two_nodes_get_two_trace_processes():
    run = job_run()
    run.ranks[1].meta["rank"].update(pid=PIDS[0], node="node-b")
    run.ranks[1].loading["pid"] = run.ranks[0].loading["pid"]
    trace = chrome_trace(run)
    names = _processes(trace)
    assert sorted(n for n in names.values() if n.startswith("rank ") and "worker" not in n) == [
        "rank 0 (node-a)", "rank 1 (node-b)"]
    assert len([n for n in names.values() if "worker" in n]) == 4


def test_a_single_process_trace_has_no_collective_wait():
    single = rank_run(0, 0.03, 0.0, fetch_s=0.01)
    single.meta.pop("rank")
    trace = chrome_trace(single)
    assert _processes(trace)[PIDS[0]] == "training process"
    assert not [e for e in trace["traceEvents"] if "collective" in e["name"] or "collective_wait_s" in e["args"]]


def test_export_writes_the_job_trace_from_the_run_folder(tmp_path):
    folder = tmp_path / "job"
    save_run(job_run(), folder)
    out = tmp_path / "trace.json"
    assert main(["export", str(folder), "--format", "chrome-trace", "-o", str(out)]) == 0
    names = _processes(json.loads(out.read_text()))
    assert "rank 0 (node-a)" in names.values() and "rank 1 (node-a)" in names.values()


# -- compare and sweep ----------------------------------------------------------------


def _compare(*runs: Run) -> dict:
    return compare_runs([(f"run{i}", f"/x/run{i}", r, summarize(r)) for i, r in enumerate(runs)],
                        created_utc="2026-12-01T00:00:00Z")


def _single(data_wait_s: float = 0.03) -> Run:
    run = rank_run(0, data_wait_s, 0.0, fetch_s=0.01)
    run.meta.pop("rank")
    return run


def test_compare_lists_collective_wait_only_when_a_run_waited_in_collectives():
    one = _compare(_single(0.03), _single(0.01))
    assert "collective_wait" not in compare_phases(one)
    page = render_compare_html(one)
    console = Console(record=True, width=250)
    console.print(compare_table(one, "out/c"))
    assert "collective wait" not in page and "collective wait" not in console.export_text()
    jobs = _compare(_single(0.03), job_run())
    assert "collective_wait" in compare_phases(jobs)
    assert "collective wait" in render_compare_html(jobs)


def test_sweep_lists_collective_wait_only_when_a_point_waited_in_collectives():
    alone = [{"fractions": {"data_wait": 0.3, "h2d": 0.0, "collective_wait": 0.0, "compute": 0.6, "other": 0.1}}]
    assert "collective_wait" not in sweep_phases(alone)
    job = [{"fractions": {"data_wait": 0.02, "h2d": 0.0, "collective_wait": 0.7, "compute": 0.2, "other": 0.08}}]
    assert sweep_phases(alone + job)[2] == "collective_wait"


# -- a real job, end to end ------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.xdist_group("straggler-job")  # the run test_distributed_script reads too, made once on one worker
def test_a_profiled_torchrun_job_has_its_straggler_ranks_and_heatmap_in_the_report_and_a_trace_per_rank(
        tmp_path, profiled_runs):
    proc, folder, summary, meta = profiled_runs(*STRAGGLER_JOB)  # the run test_distributed_script reads too
    assert proc.returncode == 0, proc.stderr
    assert summary["straggler"]["rank"] == 1
    html = (folder / "report.html").read_text()
    assert re.search(r'id="straggler-title">Straggler: rank 1 \([^)]+\), input-bound<', html)
    table = html.split('id="ranks-table"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'id="rank-(\d+)"', table) == ["0", "1"]
    assert "data:image/png;base64," in html.split('id="plot-ranks"', 1)[1].split("</figure>", 1)[0]
    out = tmp_path / "trace.json"
    assert main(["export", str(folder), "--format", "chrome-trace", "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    names = _processes(trace)
    for rank in (0, 1):
        info = json.loads((folder / "ranks" / f"rank-{rank}" / "run.json").read_text())["rank"]
        assert names[info["pid"]] == f"rank {rank} ({info['node']})"
    waits = [e for e in trace["traceEvents"] if e["name"] == "collective wait" and e["pid"] in names]
    assert waits and sum(e["dur"] for e in waits if names[e["pid"]].startswith("rank 0")) > sum(
        e["dur"] for e in waits if names[e["pid"]].startswith("rank 1"))
