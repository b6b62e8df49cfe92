"""Renderers: the HTML report, the plots and the console table, on synthetic runs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from test_intervals import noisy_run

from pipeprof.analysis.loading import counted_batches, loading_breakdown
from pipeprof.pipeline.derive import summarize
from pipeprof.render import plots
from pipeprof.render.console import print_summary, summary_table
from pipeprof.render.html import format_bytes, format_duration, render_html
from pipeprof.run_folder import LOADING_COLUMNS, PROCESS_COLUMNS, SAMPLE_COLUMNS, STEP_COLUMNS, Run

XSS = "<script>alert(1)</script>"
GIB = 1024**3


def make_meta(*, gpu: bool = False, description: str = "synthetic run", status: str = "complete") -> dict:
    return {
        "pipeprof_version": "0.1.0",
        "created_utc": "2026-11-29T22:40:00Z",
        "scenario": {
            "name": "quick",
            "description": description,
            "data": {"storage": "ram", "samples": 30000},
            "loader": {"batch_size": 128, "num_workers": 2, "prefetch_factor": None, "pin_memory": False},
            "model": {"hidden": [512, 256]},
            "train": {"steps": 45, "warmup_steps": 5, "device": "auto"},
            "profile": {"sample_hz": 10.0},
        },
        "scenario_file": "scenarios/quick.toml",
        "overrides": ["loader.num_workers=2"],
        "device": "cuda" if gpu else "cpu",
        "timing": {"method": "cuda-events" if gpu else "host-clock"},
        "environment": {"python": "3.11.7", "torch": "2.14.1", "cpu_cores": 2, "ram_bytes": 25 * GIB},
        "gpu": (
            {"available": True, "name": "Fake GPU 9000", "memory_total_bytes": 80 * GIB}
            if gpu
            else {"available": False, "reason": "no GPU in use: training device is cpu"}
        ),
        "absences": {} if gpu else {"nvml": "NVML not available: libnvidia-ml.so.1 not found"},
        "status": status,
    }


def make_run(
    n_steps: int = 50,
    warmup: int = 5,
    n_samples: int | None = 30,
    *,
    gpu: bool = False,
    description: str = "synthetic run",
    status: str = "complete",
) -> Run:
    """Steps of 100 ms each: 30 ms data wait, 10 ms h2d, 50 ms compute, 10 ms other; 128 samples."""
    step = np.arange(n_steps)
    steps = pd.DataFrame(
        {
            "step": step,
            "epoch": 0,
            "warmup": step < warmup,
            "t_start_s": step * 0.1,
            "data_wait_s": 0.03,
            "h2d_s": 0.01,
            "compute_s": 0.05,
            "step_s": 0.1,
            "host_wait_s": 0.03,
            "samples": 128,
            "loss": np.linspace(2.0, 0.5, n_steps),
            "correct": 96,
            "ready_batches": np.nan,  # filled in by tests of the prefetch queue
            "collective_wait_s": 0.0,
        }
    )[STEP_COLUMNS]
    if n_samples is None:
        n_samples = max(1, n_steps // 2)
    t = np.linspace(0.0, n_steps * 0.1, n_samples)
    samples = pd.DataFrame(
        {
            "t_s": t,
            "cpu_util_pct": 60.0,
            "main_cpu_pct": 95.0,
            "workers_cpu_pct": 130.0,
            "main_rss_bytes": 512 * 1024**2,
            "workers_rss_bytes": 1024 * 1024**2,
            "tree_rss_bytes": 1536 * 1024**2,
            "workers": 2,
            "read_bytes_per_s": 10 * 1024**2,
        }
    )[SAMPLE_COLUMNS]
    if gpu:
        samples["gpu_util_pct"] = 40.0
        samples["gpu_mem_used_bytes"] = 2 * GIB
        samples["pcie_rx_bytes_per_s"] = 1e9
        samples["pcie_tx_bytes_per_s"] = 1e6
    processes = pd.DataFrame(
        [
            (0.5, 100, "main", 95.0, 512 * 1024**2, 0, 300 * 1024**2),
            (0.5, 101, "worker", 65.0, 512 * 1024**2, 0, 40 * 1024**2),
            (0.5, 102, "worker", 65.0, 512 * 1024**2, 0, 40 * 1024**2),
            (4.0, 100, "main", 95.0, 512 * 1024**2, 0, np.nan),
            (4.0, 101, "worker", 65.0, 512 * 1024**2, 50 * 1024**2, np.nan),
            (4.0, 102, "worker", 65.0, 512 * 1024**2, 50 * 1024**2, np.nan),
        ],
        columns=PROCESS_COLUMNS,
    )
    return Run(meta=make_meta(gpu=gpu, description=description, status=status),
               steps=steps, samples=samples, processes=processes)


def make_loading(n_steps: int = 50, workers: int = 2) -> pd.DataFrame:
    """A batch per step, workers taking turns: 128 samples, 20 ms fetch, 10 ms prep, 2 ms collate."""
    step = np.arange(n_steps)
    start = step * 0.1 - 0.05
    return pd.DataFrame({
        "batch": step, "step": step, "worker": step % workers if workers else -1,
        "pid": 200 + (step % workers if workers else -100),
        "t_start_s": start, "t_end_s": start + 0.033, "fetch_s": 0.02, "prep_s": 0.01, "collate_s": 0.002,
        "samples": 128, "nbytes": 128 * 3136, "fetch_max_s": 0.0004,
    }).reindex(columns=LOADING_COLUMNS)  # columns added later (core_wait_s) empty: unknown


def loading_run(**kwargs) -> Run:
    run = make_run(**{k: v for k, v in kwargs.items() if k in ("n_steps", "warmup", "n_samples")})
    run.loading = make_loading(kwargs.get("n_steps", 50), kwargs.get("workers", 2))
    return run


def empty_samples_run() -> Run:
    run = make_run()
    run.samples = pd.DataFrame(columns=SAMPLE_COLUMNS)
    run.meta["absences"]["sampler"] = "psutil missing from this environment"
    return run


def svg_count(html: str) -> int:
    return len(re.findall(r"<svg\b", html))


# -- HTML ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_report() -> tuple[Run, dict, str]:
    run = make_run(description=f"a scenario {XSS} & more")
    summary = summarize(run)
    return run, summary, render_html(run, summary, folder_name="quick-20261129-224000")


def test_html_is_one_self_contained_file(cpu_report):
    _, _, html = cpu_report
    assert html.lstrip().startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "<script" not in html.lower()  # no scripts at all, inline or fetched
    assert "<link" not in html.lower()
    assert "@import" not in html and "url(http" not in html
    assert "@font-face" not in html


def test_html_headline_numbers(cpu_report):
    _, summary, html = cpu_report
    assert summary["samples_per_s"] == pytest.approx(1280.0)
    assert summary["bottleneck"] == "input"
    headline = html[: html.index("Key numbers")]
    assert re.search(r'id="samples-per-s">1,280<', headline)
    assert re.search(r'id="data-wait">30\.0%<', headline)
    assert "Input-bound" in headline
    assert "30% of step time was spent waiting for data" in headline  # summary's reason, verbatim
    # the fractions bar: CSS widths straight from the fractions
    assert "width: 30.000%; background: #d62728" in html
    assert "width: 50.000%" in html and "width: 10.000%" in html


def test_html_key_numbers(cpu_report):
    _, _, html = cpu_report
    assert "median 100 ms · p90 100 ms" in html
    assert "1.50 GiB" in html  # peak RSS of the tree
    assert "300 MiB" in html and "80.0 MiB" in html  # USS: main, workers summed in one snapshot
    assert "10.0 MiB/s" in html  # disk reads
    assert "75.0%" in html  # accuracy 96/128
    assert "quick-20261129-224000" in html
    assert "Run status: <b>complete</b>" in html


def test_html_has_a_plot_per_measured_series(cpu_report):
    _, _, html = cpu_report
    # steps, cpu, memory, disk; no GPU on this run
    assert svg_count(html) == 4
    for plot in ("steps", "cpu", "memory", "disk"):
        section = html.split(f'id="plot-{plot}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in section
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "ids of inlined SVGs must not collide"


def test_html_escapes_scenario_text(cpu_report):
    _, _, html = cpu_report
    assert XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in html


def test_html_absent_gpu_shows_reason(cpu_report):
    _, _, html = cpu_report
    gpu = html.split('id="plot-gpu"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" not in gpu
    assert "not measured: no GPU in use: training device is cpu" in gpu
    assert "not measured: <b>nvml</b> — NVML not available: libnvidia-ml.so.1 not found" in html


def test_html_empty_samples_says_not_measured():
    run = empty_samples_run()
    summary = summarize(run)
    html = render_html(run, summary)
    assert svg_count(html) == 1  # only the step breakdown
    assert html.count("not measured: psutil missing from this environment") == 3  # cpu, memory, disk
    cpu_row = html.split("CPU, whole machine", 1)[1].split("</tr>", 1)[0]
    assert '<span class="nm">not measured</span>' in cpu_row


def test_html_gpu_plot_when_gpu_sampled():
    run = make_run(gpu=True)
    summary = summarize(run)
    html = render_html(run, summary)
    assert svg_count(html) == 5
    gpu = html.split('id="plot-gpu"', 1)[1].split("</figure>", 1)[0]
    assert "<svg" in gpu
    assert "Fake GPU 9000" in html
    assert "40%" in html  # mean GPU utilization
    assert "2.00 GiB" in html  # peak GPU memory


def test_html_gpu_columns_ignored_when_meta_says_unavailable():
    run = make_run(gpu=True)
    run.meta["gpu"] = {"available": False, "reason": "GPU disabled by --set train.device=cpu"}
    html = render_html(run, summarize(run))
    assert svg_count(html) == 4
    assert "not measured: GPU disabled by --set train.device=cpu" in html


def test_html_tolerates_missing_meta_and_summary_keys():
    run = make_run()
    run.meta = {}
    summary = summarize(run)
    for key in ("cpu", "memory", "gpu", "step_time_s", "disk"):
        del summary[key]
    html = render_html(run, summary)
    assert "Run status: <b>unknown</b>" in html
    assert "not measured: no GPU was recorded for this run" in html


def test_html_incomplete_run_is_flagged():
    run = make_run(status="failed")
    run.meta["error"] = "RuntimeError: <boom>"
    run.meta["notes"] = ["loader.pin_memory = true has no effect without a CUDA device: not applied"]
    html = render_html(run, summarize(run))
    assert "Run status: failed." in html
    assert "RuntimeError: &lt;boom&gt;" in html and "<boom>" not in html
    assert "Note: loader.pin_memory = true has no effect" in html


def test_html_uss_absence_reason():
    run = make_run()
    run.processes["uss_bytes"] = np.nan
    run.meta["absences"]["uss"] = "psutil.AccessDenied: pid 101"
    html = render_html(run, summarize(run))
    uss_row = html.split("USS (unshared memory)", 1)[1].split("</tr>", 1)[0]
    assert "not measured" in uss_row and "psutil.AccessDenied: pid 101" in uss_row


def test_html_gpu_metric_absence_explains_missing_gpu_plot():
    run = make_run()
    run.meta["gpu"] = {"available": True, "name": "Fake GPU 9000"}
    run.meta["absences"] = {"gpu_util_pct": "not supported by this GPU/driver: NVML_ERROR_NOT_SUPPORTED"}
    html = render_html(run, summarize(run))
    gpu = html.split('id="plot-gpu"', 1)[1].split("</figure>", 1)[0]
    assert "not measured: not supported by this GPU/driver: NVML_ERROR_NOT_SUPPORTED" in gpu


def test_html_long_run_stays_small():
    run = make_run(n_steps=20_000, warmup=10, n_samples=2_000, gpu=True)
    html = render_html(run, summarize(run))
    assert svg_count(html) == 5
    assert len(html.encode()) < 2_000_000


def test_html_loading_section():
    run = loading_run()
    summary = summarize(run)
    html = render_html(run, summary)
    assert svg_count(html) == 6  # steps, cpu, memory, disk + loading timeline and split
    section = html.split('<h2 id="loading">', 1)[1].split("<h2>", 1)[0]
    for plot in ("loading-timeline", "loading-split"):
        assert "<svg" in section.split(f'id="plot-{plot}"', 1)[1].split("</figure>", 1)[0]
    # the summary's numbers: 20 ms / 128 samples = 156 µs fetch, 78.1 µs prep per sample
    headline = section.split('id="loading-headline"', 1)[1].split("</p>", 1)[0]
    assert "fetch <b>156 µs</b>" in headline and "prep <b>78.1 µs</b>" in headline
    assert "collate <b>2.00 ms</b> per batch" in headline and "<b>33.0 ms</b> to make" in headline
    assert "fetch 62.5%" in headline
    table = section.split('id="loading-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><th scope=\"row\">(.*?)</tr>", table, re.S)
    assert [r.split("<", 1)[0] for r in rows] == ["worker 0", "worker 1"]
    # counted steps 5..49: worker 0 made the even ones (22), worker 1 the odd (23); busy 33 ms every 200 ms
    assert ">22<" in rows[0] and ">23<" in rows[1]
    assert "156 µs" in rows[0] and "2.00 ms" in rows[0] and "17%" in rows[0]
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_html_loading_in_the_main_process():
    run = loading_run(workers=0)
    html = render_html(run, summarize(run))
    table = html.split('id="loading-table"', 1)[1].split("</table>", 1)[0]
    assert ">main<" in table and "worker 0" not in table


def test_html_without_loading_records_says_not_measured(cpu_report):
    _, summary, html = cpu_report
    assert summary["loading"] is None
    section = html.split('<h2 id="loading">', 1)[1].split("<h2>", 1)[0]
    assert "<svg" not in section and 'id="loading-table"' not in section
    assert section.count("not measured: this run has no loading records") == 3  # table, timeline, split


def test_html_loading_only_in_warmup():
    run = loading_run()
    run.loading = run.loading.iloc[:5]  # batches of the five warm-up steps only
    html = render_html(run, summarize(run))
    section = html.split('<h2 id="loading">', 1)[1].split("<h2>", 1)[0]
    assert "not measured: no loading records for counted steps" in section
    assert "<svg" in section.split('id="plot-loading-timeline"', 1)[1].split("</figure>", 1)[0]


def test_html_long_run_loading_stays_small():
    run = loading_run(n_steps=20_000, warmup=10, n_samples=2_000, workers=8)
    html = render_html(run, summarize(run))
    assert svg_count(html) == 6
    assert len(html.encode()) < 2_000_000
    assert "bins of 50 batches per worker" in html
    assert len(plots.loading_timeline_svg(run.loading)) < 150_000


# -- plots -----------------------------------------------------------------------


def test_plots_return_none_on_empty_data():
    empty = pd.DataFrame(columns=SAMPLE_COLUMNS)
    for fn in (plots.cpu_svg, plots.memory_svg, plots.disk_svg, plots.gpu_svg):
        assert fn(empty) is None
    assert plots.step_breakdown_svg(pd.DataFrame(columns=[*STEP_COLUMNS, "other_s"])) is None
    all_nan = pd.DataFrame({"t_s": [0.0, 1.0], "read_bytes_per_s": [np.nan, np.nan]})
    assert plots.disk_svg(all_nan) is None
    assert plots.gpu_svg(make_run().samples) is None  # no GPU columns
    assert plots.loading_timeline_svg(pd.DataFrame(columns=LOADING_COLUMNS)) is None
    assert plots.loading_split_svg(loading_breakdown(pd.DataFrame(columns=LOADING_COLUMNS))) is None


def test_loading_plots_one_row_per_worker():
    run = loading_run(workers=3)
    timeline = plots.loading_timeline_svg(run.loading, (0.45, 5.0))
    assert all(f"worker {w}" in timeline for w in range(3))
    assert "fetch (off CPU: storage, sleep)" in timeline and "warm-up (not counted)" in timeline
    assert "waiting for a core" not in timeline  # not measured in this run: not drawn as 0
    split = plots.loading_split_svg(loading_breakdown(counted_batches(run.loading, run.steps)))
    assert all(f"worker {w}" in split for w in range(3)) and "µs per sample" in split


def test_plot_svg_is_inline_ready():
    svg = plots.cpu_svg(make_run().samples, (0.5, 5.0))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<?xml" not in svg and "<!DOCTYPE" not in svg and "<metadata" not in svg
    assert "warm-up (not counted)" in svg


def test_plots_downsample_long_runs():
    from pipeprof.analysis.steps import step_breakdown

    run = make_run(n_steps=20_000, warmup=10, n_samples=5_000)
    svg = plots.step_breakdown_svg(step_breakdown(run.steps))
    assert "mean of 34-step bins" in svg
    assert len(svg) < 150_000
    assert len(plots.cpu_svg(run.samples)) < 150_000


def test_plots_are_deterministic():
    samples = make_run().samples
    assert plots.memory_svg(samples, (0.5, 5.0)) == plots.memory_svg(samples, (0.5, 5.0))


# -- formatting and console ------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [(512 * 1024**2, "512 MiB"), (1.5 * GIB, "1.50 GiB"), (900, "900 B"), (12.5 * 1024, "12.5 KiB")],
)
def test_format_bytes(value, text):
    assert format_bytes(value) == text


def test_format_duration_marks_the_missing_value_in_html():
    assert format_duration(0.0123) == "12.3 ms"
    assert format_duration(83.0) == "1 min 23 s"
    assert format_duration(None) == '<span class="nm">not measured</span>'
    assert format_bytes(float("nan")) == '<span class="nm">not measured</span>'


def test_console_table_has_numbers_and_folder(tmp_path):
    run = make_run()
    summary = summarize(run)
    folder = tmp_path / "runs" / "quick-[20261129]"  # brackets would be rich markup
    console = Console(record=True, width=120)
    print_summary(summary, folder, console=console)
    text = console.export_text()
    assert "pipeprof: quick" in text
    assert re.search(r"throughput\s+1,280 samples/s", text)
    assert re.search(r"step time median / p90\s+100 ms / 100 ms", text)
    assert re.search(r"data wait \(share of step time\)\s+30\.0%", text)
    assert re.search(r"compute \(share of step time\)\s+50\.0%", text)
    assert re.search(r"bottleneck\s+input-bound: 30% of step time", text)
    assert re.search(r"CPU mean / peak \(of all cores\)\s+60% / 60%", text)
    assert re.search(r"peak RSS\s+1\.50 GiB", text)
    assert re.search(r"accuracy\s+75\.0%", text)
    assert re.search(r"fetch/prep/collate per sample\s+not measured", text)
    assert str(folder) in "".join(text.split())  # a long path (a pytest-xdist worker's folder) wraps


def test_console_loading_row():
    console = Console(record=True, width=120)
    run = loading_run()
    print_summary(summarize(run), "runs/x", console=console)
    # 20 ms, 10 ms and 2 ms over 128 samples
    assert re.search(r"fetch/prep/collate per sample\s+156 µs / 78\.1 µs / 15\.6 µs", console.export_text())


def test_console_table_shows_not_measured():
    run = empty_samples_run()
    summary = summarize(run)
    summary.pop("memory")
    table = summary_table(summary, "runs/x")
    console = Console(record=True, width=120)
    console.print(table)
    text = console.export_text()
    assert re.search(r"CPU mean / peak \(of all cores\)\s+not measured", text)
    assert re.search(r"peak RSS\s+not measured", text)


# -- issue 14, item 8: runs with no steps or that failed early --------------------------------------


def test_html_attributes_get_plain_text_not_markup():
    # 0 counted steps: every fraction is "not measured"; the stacked bar's title attributes once showed
    # title="data wait: <span class="nm">not measured</span>" (the filter's markup, escaped into the attribute).
    run = make_run(n_steps=5, warmup=5)
    html = render_html(run, summarize(run))
    titles = re.findall(r'title="([^"]*)"', html)
    assert titles and not [t for t in titles if "&lt;" in t or "<" in t]
    assert 'title="data wait: not measured"' in html


def test_html_run_without_enough_steps_names_no_bottleneck():
    run = make_run(n_steps=8, warmup=5)
    html = render_html(run, summarize(run))
    assert "Too few counted steps to judge" in html or "No counted steps" in html
    assert "Only 3 steps were counted" in html and 'id="recommendations-table"' not in html


def test_html_failed_run_shows_the_caveat_and_no_worker_memory():
    run = make_run(status="failed")
    run.samples["workers"] = 0
    run.samples["workers_rss_bytes"] = 0.0
    run.processes = run.processes[run.processes["role"] != "worker"]
    summary = summarize(run)
    assert summary["memory"]["peak_workers_rss_bytes"] is None
    html = render_html(run, summary)
    assert "the run ended early (failed) after 50 steps (45 counted)" in html
    rss = html.split("Peak RSS", 1)[1].split("</tr>", 1)[0]
    assert "workers <span class=\"nm\">not measured</span>" in rss and "workers 0 B" not in rss


def test_console_top_recommendation_of_a_failed_run_shows_the_caveat():
    run = make_run(status="failed")
    console = Console(record=True, width=300)
    print_summary(summarize(run), "runs/x", console=console)
    assert "note: the run ended early (failed) after 50 steps (45 counted)" in console.export_text()


# -- issue 14, items 3 and 10: a script that builds its loaders again per fit; evaluation passes on the charts --


def _loader(number: int, name: str, role: str, *, num_workers: int = 0, batches: int = 20) -> dict:
    return {"number": number, "name": name, "role": role, "dataset": "SyntheticImages", "dataset_samples": 2560,
            "batch_size": 128, "num_workers": num_workers, "pin_memory": False, "prefetch_factor": None,
            "persistent_workers": False, "drop_last": False, "multiprocessing_context": None,
            "batches": batches, "samples": 128 * batches, "passes": 1, "wait_s": 0.03 * batches,
            "wait_per_batch_s": 0.03, "fetch_per_sample_s": 1e-5 * (number + 1), "prep_per_sample_s": 2e-5,
            "collate_per_sample_s": 1e-6, "eval_s": 0.5 if role == "eval" else None}


def refits_run(fits: int = 3, eval_s: float = 0.5) -> Run:
    """A d2l-style script run: ``fits`` fits of 20 steps, each with a new ``train_loader`` and ``val_loader``
    (same settings); the validation pass after each fit (``eval_s``) is left out of the step it fell in (the first
    step of the next fit), as ``pipeprof.script.event_steps`` cuts it, so that step lasts ``eval_s`` longer than
    its ``step_s``. One more ``val_loader`` with other settings (2 workers) must not fold with the others."""
    n = 20 * fits
    run = make_run(n_steps=n, warmup=5, n_samples=4 * n)
    # Each step starts later by the passes before it; the pass in step 20 pushes step 21 on, not step 20.
    step = np.arange(n)
    shift = eval_s * np.maximum(step // 20 - (step % 20 == 0), 0)
    run.steps["t_start_s"] = run.steps["t_start_s"] + shift
    run.samples["t_s"] = np.linspace(0.0, float(run.steps["t_start_s"].iloc[-1]) + 0.1, len(run.samples))
    loaders = []
    for fit in range(fits):
        loaders += [_loader(2 * fit, "train_loader", "train"), _loader(2 * fit + 1, "val_loader", "eval", batches=4)]
    loaders.append(_loader(2 * fits, "val_loader", "eval", num_workers=2, batches=4))
    run.meta.update({"kind": "script", "loaders": loaders, "step_source": "optimizer",
                     "script": {"command_line": "python d2l_style.py", "cwd": "/work", "ended": {"how": "exit",
                                                                                                  "detail": 0}}})
    run.meta.pop("scenario")
    return run


def test_a_step_holding_an_evaluation_pass_is_found_from_its_times():
    from pipeprof.render.html import EVALUATION_LABEL, not_counted_spans

    run = refits_run(fits=3, eval_s=0.5)
    spans = not_counted_spans(run.steps, run.meta["loaders"])
    starts = run.steps.set_index("step")["t_start_s"]
    assert [(round(a, 6), round(b - a, 6), label) for a, b, label in spans] == [
        (round(starts[20], 6), 0.5, EVALUATION_LABEL), (round(starts[40], 6), 0.5, EVALUATION_LABEL)]
    assert not_counted_spans(make_run().steps, None) == []  # a scenario's steps follow each other


def test_device_timed_steps_draw_no_left_out_time():
    """On CUDA a step's step_s is the device's (previous compute end to this one's) and its start the host's: the
    difference is the host running ahead, not an evaluation pass."""
    from pipeprof.render.html import not_counted_spans

    run = make_run(gpu=True)
    run.steps["step_s"] = 0.1 - 0.004 * (run.steps["step"] % 2)  # device spans jitter around the host's
    assert len(not_counted_spans(run.steps, None, "host-clock")) > 0  # host-timed, the same numbers would be
    assert not_counted_spans(run.steps, None, "cuda-events") == []
    html = render_html(run, summarize(run))
    assert "outside the counted steps" not in html and "Yellow" not in html


def test_time_charts_shade_and_name_the_evaluation_passes():
    run = refits_run()
    html = render_html(run, summarize(run))
    for plot in ("cpu", "memory", "disk", "loading-timeline"):
        if plot == "loading-timeline":
            continue  # this run has no loading records
        figure = html.split(f'<figure id="plot-{plot}">', 1)[1].split("</figure>", 1)[0]
        assert "evaluation passes (not counted)" in figure, plot
        assert "Yellow: the evaluation passes of val_loader (1.00 s in all)" in figure, plot
    steps_figure = html.split('<figure id="plot-steps">', 1)[1].split("</figure>", 1)[0]
    assert "Yellow" not in steps_figure  # its x axis is the step: nothing outside the steps to draw
    plain = render_html(make_run(), summarize(make_run()))
    assert "evaluation passes (not counted)" not in plain and "Yellow" not in plain


def test_the_loading_timeline_shades_the_evaluation_passes_too():
    run = refits_run()
    run.loading = make_loading(len(run.steps), 0)
    run.loading["t_start_s"] = run.steps["t_start_s"].to_numpy() - 0.05
    run.loading["t_end_s"] = run.loading["t_start_s"] + 0.033
    html = render_html(run, summarize(run))
    figure = html.split('<figure id="plot-loading-timeline">', 1)[1].split("</figure>", 1)[0]
    assert "evaluation passes (not counted)" in figure and "Yellow: the evaluation passes" in figure


def test_plots_merge_close_spans_of_one_name():
    run = make_run()
    window = (0.5, 5.0)
    many = [(1.0 + i * 0.001, 1.0 + i * 0.001 + 0.0005, "evaluation passes (not counted)") for i in range(200)]
    one = plots.cpu_svg(run.samples, window, many[:1])
    merged = plots.cpu_svg(run.samples, window, many)
    assert one is not None and merged is not None and "evaluation passes (not counted)" in merged
    assert len(merged) < len(one) + 2000  # 200 passes 1 ms apart draw as one band, not 200 elements
    assert merged.count("evaluation passes (not counted)") == 1  # one legend entry
    assert "evaluation passes" not in (plots.cpu_svg(run.samples, window) or "")


def test_html_folds_loaders_of_one_name_and_settings():
    run = refits_run(fits=3)
    html = render_html(run, summarize(run))
    table = html.split('id="loaders-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><th scope=\"row\">(.*?)</th>", table, re.S)
    assert len(rows) == 3  # train_loader ×3, val_loader ×3, the val_loader with 2 workers
    assert "<code>train_loader</code><br><span class=\"note\">×3 loaders</span>" in rows[0]
    assert "×3 loaders" in rows[1] and "×" not in rows[2] and "num_workers=2" in table.split(rows[2], 1)[1]
    first = table.split(rows[0], 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'<td class="n">([^<]*)</td>', first)[:3] == ["60", "7,680", "3"]  # batches, samples, passes
    assert "30.0 µs / 20.0 µs" in first  # fetch per sample averaged over the three loaders' samples (10, 30, 50 µs)
    each = html.split('<details id="loaders-each">', 1)[1].split("</details>", 1)[0]
    assert "Each loader (7)" in each and each.count("<tr><th scope=\"row\">") == 7


def test_html_lists_a_single_loader_without_folding():
    run = refits_run(fits=1)
    html = render_html(run, summarize(run))
    assert "×" not in html.split('id="loaders-table"', 1)[1].split("</table>", 1)[0]
    assert '<details id="loaders-each">' not in html


def test_console_folds_loaders_of_one_name_and_settings():
    console = Console(record=True, width=400)
    run = refits_run(fits=10)
    summary = summarize(run)
    print_summary(summary, "runs/x", console=console)
    line = next(x for x in console.export_text().splitlines() if x.startswith("loaders"))
    assert ("train_loader ×10 (train: 10 loaders, 10 passes, 200 batches), "
            "val_loader ×10 (eval: 10 loaders, 10 passes, 40 batches), val_loader (eval, 4 batches)") in line


def test_a_script_report_speaks_of_pipeprof_profile_only():
    """Issue 14 item 11: the page's own words for a script never give scenario commands (`pipeprof run`,
    `--set`, scenario keys); the analysis' sentences are checked where they are written."""
    run = refits_run()
    summary = summarize(run)
    summary["recommendations"] = []  # the analysis' sentences aside: the template's words only
    text = re.sub(r"<svg.*?</svg>|<style>.*?</style>", "", render_html(run, summary), flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    for words in ("pipeprof run", "--set", "--cprofile", "--verify", "train.threads", "scenario file"):
        assert words not in text, words


@pytest.mark.parametrize("rate, text", [(4.3, "4.3"), (0.52, "0.52"), (37176.4, "37,176")])
def test_low_throughputs_keep_their_significant_figures(rate, text):
    """Issue 14 item 11: "compute ceiling 4 samples/s ... the 4 samples/s now"; the page's rates keep 3 figures."""
    run = make_run()
    summary = summarize(run)
    summary["samples_per_s"] = rate
    summary["recommendations"] = [{"change": {}, "code_change": "cheaper model", "predicted_samples_per_s": rate * 2,
                                   "predicted_speedup": 2.0, "reason": "r", "model": "m"}]
    html = render_html(run, summary)
    assert f'id="samples-per-s">{text}<' in html
    assert re.search(rf"<td class=\"v\">{re.escape(text)} samples/s</td>", html)
    doubled = {4.3: "8.6", 0.52: "1.04", 37176.4: "74,353"}[rate]
    table = html.split('id="recommendations-table"', 1)[1].split("</table>", 1)[0]
    assert f'<td class="v">{doubled}</td>' in table
    console = Console(record=True, width=200)
    print_summary(summary, "runs/x", console=console)
    assert re.search(rf"throughput\s+{re.escape(text)} samples/s", console.export_text())


def test_console_shows_where_in_a_step_of_several_batches_the_waits_fall_and_no_unoffered_profiler():
    """Gradient accumulation (issue 14, item 12): the training loader's mean wait by batch position; a script's
    code profile, which pipeprof profile does not offer, is no line of its own."""
    console = Console(record=True, width=400)
    run = refits_run(fits=1)
    summary = summarize(run)
    train = next(d for d in summary["loaders"] if d["role"] == "train")
    train["wait_by_position_s"] = [0.0054, 0.0022, 0.0109, 0.0103]
    print_summary(summary, "runs/x", console=console)
    text = console.export_text()
    assert re.search(r"wait by batch in the step\s+5\.40 ms / 2\.20 ms / 10\.9 ms / 10\.3 ms", text)
    assert "code profile" not in text


def test_html_says_which_clock_timed_the_steps_and_flags_a_host_clock_gpu_run():
    on_device = make_run(gpu=True)
    html = render_html(on_device, summarize(on_device))
    assert "timed on the device clock (CUDA events)" in html
    assert "timing-fallback" not in html
    fallback = make_run(gpu=True)
    fallback.meta["timing"] = {"method": "host-clock", "parts": dict.fromkeys(("data_wait", "h2d", "compute"),
                                                                              "host-clock"),
                               "reason": "no CUDA event was recorded: the script did not initialize CUDA"}
    html = render_html(fallback, summarize(fallback))
    assert "timed on the host clock" in html
    assert "Host-clock timing on a GPU run." in html and "the script did not initialize CUDA" in html
    cpu = make_run()
    cpu.meta["timing"] = {"method": "host-clock", "parts": {}, "reason": "training on the CPU: synchronous"}
    html = render_html(cpu, summarize(cpu))
    assert "Host-clock timing on a GPU run." not in html and "Timing: host clock — training on the CPU" in html


# -- issue 17, item 2: every prediction with its interval ------------------------------------------------------


def _predicted_run(noise: float, wait: float = 0.3):
    return noisy_run(noise, wait=wait)  # test_intervals' made-up runs, whose noise is known


def test_console_and_report_show_each_prediction_with_its_interval():
    run = _predicted_run(0.1, wait=0.5)  # waiting half of each step: a certain gain
    summary = summarize(run)
    (rec,) = summary["recommendations"]
    low, high = rec["interval"]["speedup"]
    text = f"×{rec['predicted_speedup']:.2f} ({low:.2f}–{high:.2f})"
    assert low > 1.0
    console = Console(record=True, width=400)
    print_summary(summary, "runs/x", console=console)
    assert re.search(r"top recommendation\s+.*, " + re.escape(text), console.export_text())
    html = render_html(run, summary)
    assert text in html and "may not help" not in html.split('id="recommendations"')[1].split("</table>")[0]
    assert "interval: block bootstrap" in html


def test_a_prediction_that_may_not_help_says_so_in_the_report():
    run = _predicted_run(0.8)
    summary = summarize(run)
    (rec,) = summary["recommendations"]
    low, high = rec["interval"]["speedup"]
    html = render_html(run, summary)
    assert f"(may not help: ×{low:.2f}–{high:.2f})" in html and 'class="may-not-help"' in html


def test_the_report_shows_whether_the_re_run_fell_in_the_interval():
    run = _predicted_run(0.1)
    (rec,) = summarize(run)["recommendations"]
    low, high = rec["interval"]["samples_per_s"]
    run.meta["verification"] = {"status": "complete", "change": rec["change"], "set": "--set x",
                                "predicted_samples_per_s": rec["predicted_samples_per_s"],
                                "predicted_speedup": rec["predicted_speedup"],
                                "measured_samples_per_s": (low + high) / 2}
    html = render_html(run, summarize(run))
    assert re.search(r"<th scope=\"row\">interval</th><td>measured inside the predicted [\d,]+–[\d,]+ samples/s "
                     r"\(80% interval\)", html)
