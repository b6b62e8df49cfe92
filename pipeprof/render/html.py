"""The HTML report: one self-contained file, built from a Run and its summary.

Everything the page needs is inlined (CSS, SVG plots); it loads nothing from
anywhere, so it can be mailed or archived with the run folder. All text goes
through Jinja2 autoescaping; the only markup marked safe is the SVG that
``plots`` draws from numbers. Statistics come from ``analysis``; this module
only chooses what to show and formats numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from jinja2 import ChainableUndefined, Environment, PackageLoader, Undefined
from markupsafe import Markup

from pipeprof import format as fmt
from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.code_view import CProfileView, StepCost
from pipeprof.analysis.intervals import Interval
from pipeprof.analysis.steps import counted_steps, counted_window_s, step_breakdown
from pipeprof.analysis.summary import SUMMARY_SCHEMA_VERSION, Summary, as_summary
from pipeprof.format import NOT_MEASURED, finite
from pipeprof.render import plots
from pipeprof.render.advice_text import note_text, reason_text
from pipeprof.render.cache_text import cache_words
from pipeprof.render.gpu_view import gpu_telemetry_rows
from pipeprof.render.interval_text import change_text, speedup_text
from pipeprof.render.loaders import LoaderGroup, fold_loaders
from pipeprof.render.prediction_text import model_text
from pipeprof.render.ranks import rank_label, rank_rows, straggler_view
from pipeprof.render.transform_plot import bars_svg
from pipeprof.render.transform_view import loader_views, split_text, table_rows
from pipeprof.render.verdict_text import bottleneck_words, verdict_notes, verdict_sentence
from pipeprof.render.verification_text import verification_words
from pipeprof.render.window_plot import window_timeline_svg
from pipeprof.run_folder import MAIN_PROCESS, Run
from pipeprof.run_meta import JobInfo, JsonObject, LoaderInfo, RankInfo, RunMeta, ScriptInfo

# Verdict classes (analysis.verdict.CLASSES): a title, and the CSS family for its color.
_VERDICT_TITLES = {
    "compute": "Compute-bound",
    "input:fetch": "storage (fetch)",
    "input:prep": "CPU preprocessing (prep)",
    "input:start": "workers starting",
    "input:main": "the training process (main)",
    "h2d": "Bound by the copy to the device",
    "balanced": "no single cause",
    "unknown": "Too few counted steps to judge",
}

# Plain words for the verdict's evidence keys; others show as the key itself.
_EVIDENCE_LABELS = {
    "data_wait_fraction": "data wait, share of step time",
    "h2d_fraction": "host → device copy, share of step time",
    "compute_fraction": "compute, share of step time",
    "data_wait_mean_s": "data wait per step, mean",
    "fetch_fraction": "fetch (off CPU: storage, sleep), share of batch-making time",
    "core_wait_fraction": "waiting for a core, share of batch-making time",
    "prep_fraction": "prep, share of batch-making time",
    "collate_fraction": "collate, share of batch-making time",
    "fetch_per_sample_s": "fetch per sample",
    "core_wait_per_sample_s": "waiting for a core per sample",
    "prep_per_sample_s": "prep per sample",
    "batch_s": "time to make one batch",
    "production_over_wait_fraction": "batch-making time over the wait per step",
    "capacity_batches": "prefetch queue capacity (batches)",
    "mean_ready_batches": "batches ready when the loop asked, mean",
    "empty_step_fraction": "steps that found the queue empty",
    "full_step_fraction": "steps that found the queue full",
    "ready_wait_fraction": "share of the wait on steps that found a batch ready",
    "wait_when_ready_mean_s": "wait per step when a batch was ready, mean",
    "wait_when_empty_mean_s": "wait per step when the queue was empty, mean",
    "supply_interval_s": "time the workers take per batch (batch-making time / num_workers)",
    "wait_when_ready_over_supply_fraction": "wait when a batch was ready, over the workers' time per batch",
    "worker_busy_mean_fraction": "workers busy, mean share of their span",
    "mean_read_bytes_per_s": "disk reads, mean",
    "peak_read_bytes_per_s": "disk reads, peak",
    "disk_ceiling": "disk ceiling",
    "sequential_cold_bytes_per_s": "probed cold sequential read ceiling",
    "peak_over_sequential_fraction": "peak disk reads over the sequential ceiling",
    "random_4k_cold_bytes_per_s": "probed cold random 4 KiB read ceiling",
    "peak_over_random_4k_fraction": "peak disk reads over the random 4 KiB ceiling",
    "cause_measured": "cause measured (not inferred)",
}

# Keys of run.json's "absences" that explain a missing plot, first match wins.
_SAMPLER_KEYS = ("sampler", "psutil", "samples")
_DISK_KEYS = ("io_counters", "disk_io", "disk")
_GPU_KEYS = ("gpu_util_pct", "gpu_mem_used_bytes", "gpu", "nvml")
_LOADING_KEYS = ("loading",)


def render_html(run: Run, summary: Summary | Mapping[str, Any], *, folder_name: str | None = None) -> str:
    """The report page for ``run`` as one HTML string (UTF-8, no external resources); a summary.json's dict is
    read back first (``as_summary``)."""
    meta = run.info
    env = _environment()
    summary = as_summary(summary)
    verdict = _verdict(summary)  # the headline is the verdict's
    title = verdict["title"] if summary.steps else "No counted steps"
    shown = shown_phases(run, summary)
    phases = [{"key": p, "label": plots.PHASE_LABELS[p], "color": plots.PHASE_COLORS[p],
               "fraction": finite(summary.fractions.get(p))} for p in shown]
    # time the counted window holds that no counted step does: shaded on every time chart, named once
    excluded = not_counted_spans(run.steps, meta.loaders, meta.timing.method)
    return env.get_template("report.html.j2").render(
        s=summary,
        bottleneck_reason=bottleneck_words(summary.bottleneck_why),
        cache_reason=cache_words(summary.cache.reason) if summary.cache is not None else None,
        is_script=bool(summary.script and summary.script.script),
        schema_version=SUMMARY_SCHEMA_VERSION,
        meta=meta,
        folder_name=folder_name,
        scenario_name=summary.scenario or run.name,
        scenario_description=meta.settings.description,
        bottleneck_title=title,
        verdict=verdict,
        recommendations=_recommendations(summary),
        verification=_verification(summary),
        phases=phases,
        plots=_plots(run, meta, summary, excluded, shown),
        straggler=straggler_view(summary),
        ranks=_ranks(run, summary),
        loading=_loading(run, meta, summary, excluded),
        code_profile=_code_profile(summary),
        transforms=_transforms(summary),
        scenario_sections=_scenario_sections(meta.scenario),
        script=_script(meta),
        environment_rows=_rows(meta.environment.recorded),
        gpu_rows=_rows({k: v for k, v in meta.gpu.recorded.items() if k != "available"}),
        gpu_available=meta.gpu.available,
        gpu_reason=_gpu_reason(meta),
        gpu_telemetry=gpu_telemetry_rows(summary, meta),
        absences=sorted((summary.absences or meta.absences).items()),
        overrides=[str(o) for o in (meta.overrides or [])],
        notes=list(meta.notes),
        error=meta.error,
        uss_reason=meta.absences.get("uss") or "no USS snapshot was taken",
        status=str(summary.status or meta.status or "unknown"),
        cpu=summary.cpu, memory=summary.memory, disk=summary.disk, timing=summary.timing,
        damage=[d.text() for d in summary.damage],
        tail_pct=round(100 * Summary.tail_fraction),
    )


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("pipeprof", "render/templates"),
        autoescape=True,
        undefined=ChainableUndefined,  # a summary from an older/newer version may lack keys
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    env.tests["measured"] = measured
    return env


# -- what to show --------------------------------------------------------------


def _verdict(summary: Summary) -> dict[str, Any]:
    """The verdict block: title, sentence, notes and the evidence rows."""
    v = summary.verdict
    klass = v.klass
    title = _VERDICT_TITLES.get(klass, klass)
    if klass.startswith("input:") or (klass == "balanced" and v.degree):
        title = f"{(v.degree or 'input-bound').capitalize()}: {title}"
    elif klass == "balanced":
        title = f"Balanced: {title}"
    family = "input" if klass.startswith("input:") else klass
    rows = [(_EVIDENCE_LABELS.get(k, k.replace("_", " ")), format_evidence(k, value)) for k, value in v.evidence.items()]
    return {"class": klass, "family": family, "title": title, "rule": v.rule, "sentence": verdict_sentence(v),
            "notes": verdict_notes(v), "rows": rows + _context_rows(summary.attribution)}


def _recommendations(summary: Summary) -> list[dict[str, Any]]:
    """The Recommendations table's rows, formatted."""
    intervals = summary.intervals if len(summary.intervals) == len(summary.recommendations) else \
        (None,) * len(summary.recommendations)
    return [{"change": change_text(r), "samples_per_s": format_significant(r.predicted_samples_per_s),
             "speedup": speedup_text(r, i), "may_not_help": i is not None and i.may_not_help,
             "method": i.method if i is not None else "", "reason": reason_text(r.reason), "note": note_text(r.note) or "",
             "model": model_text(r.model)}
            for r, i in zip(summary.recommendations, intervals, strict=True)]


def _verification(summary: Summary) -> dict[str, Any] | None:
    """The verified-prediction block under the recommendations; None when ``--verify`` was not asked."""
    v = summary.verification
    if v is None:
        return None
    folder = v.text("folder")
    return {"status": v.status, "reason": v.text("reason") or "", "set": v.text("set") or "no change",
            "dropped": v.texts("dropped"),
            "report": f"{folder}/report.html" if folder else None,
            "predicted": format_significant(v.number("predicted_samples_per_s")),
            "measured": format_significant(v.number("measured_samples_per_s")),
            "predicted_speedup": _speedup(v.number("predicted_speedup")),
            "measured_speedup": _speedup(v.measured_speedup),
            "within": {True: "inside", False: "outside"}.get(v.within_interval) if v.within_interval is not None
            else None,
            "interval": _interval_words(v.interval),
            "words": verification_words(v)}


def _interval_words(interval: Interval | None) -> str:
    """The checked recommendation's samples/s interval in words, or why it has none."""
    if interval is None:
        return "no interval"
    if interval.samples_per_s is not None:
        low, high = interval.samples_per_s
        return f"{format_significant(low)}–{format_significant(high)} samples/s ({fmt.pct(interval.level, 0)} interval)"
    return interval.method or "no interval"


def _speedup(value: Any) -> str:
    return NOT_MEASURED if _missing(value) else f"×{fmt.number(value, 2)}"


def _context_rows(attr: Attribution) -> list[tuple[str, str]]:
    """CPU, GPU and disk-ceiling evidence shown under every verdict, "not measured: why" when absent."""
    rows: list[tuple[str, str]] = []  # plain text (escaped by the template) or Markup
    cpu = attr.cpu
    wanted = (f"{fmt.plural(cpu.num_workers, 'worker')} + "
              f"{fmt.plural(cpu.torch_threads, 'torch thread')} on {cpu.cores_usable} usable cores")
    rows.append(("workers + torch threads vs usable cores", _NOT_MEASURED_HTML if cpu.oversubscribed is None else
                 wanted + (": oversubscribed" if cpu.oversubscribed else "")))
    rows.append(("cores busy (training process + workers), mean",
                 _NOT_MEASURED_HTML if _missing(cpu.busy_cores) else
                 Markup("{} of {} (training process {}, workers {}, % of one core)").format(
                     format_number(cpu.busy_cores), format_number(cpu.cores_usable),
                     format_pct(cpu.main_cpu_mean_pct), format_pct(cpu.workers_cpu_mean_pct))))
    gpu = attr.gpu
    rows.append(("GPU idle, mean", Markup('<span class="nm">not measured: {}</span>').format(gpu.absent)
                 if gpu.absent is not None else format_pct(gpu.idle_pct)))
    ceiling = attr.disk.ceiling
    if ceiling is not None and ceiling.absent is not None:
        rows.append(("disk reads vs the machine's ceiling",
                     Markup('<span class="nm">not compared: {}</span>').format(ceiling.absent)))
    return rows


def format_evidence(key: str, value: Any) -> str:
    """An evidence value formatted by the unit its key ends with."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if key.endswith("_fraction"):
        return format_fraction_pct(value)
    if key.endswith("_bytes_per_s"):
        return format_byte_rate(value)
    if key.endswith("_reads_per_s"):
        return format_rate(value, "reads/s")
    if key.endswith("_pct"):
        return format_pct(value)
    if key.endswith("_s"):
        return format_duration(value)
    return format_number(value)


def shown_phases(run: Run, summary: Summary | Mapping[str, Any]) -> list[str]:
    """The phases the report lists: all of ``plots.PHASE_COLORS`` but collective wait, which only a run where
    some step (of the run or of one of its ranks) waited in collectives shows: one process never does."""
    tables = [run.steps, *(r.steps for r in run.ranks)]
    waited = any(t is not None and "collective_wait_s" in t and (pd.to_numeric(t["collective_wait_s"],
                 errors="coerce") > 0).any() for t in tables)
    waited = waited or (finite(as_summary(summary).fractions.get("collective_wait")) or 0.0) > 0
    return [p for p in plots.PHASE_COLORS if p != "collective_wait" or waited]


def _ranks(run: Run, summary: Summary) -> dict[str, Any] | None:
    """The Ranks section: a row per rank and the rank x step heatmaps; None for one process."""
    rows = rank_rows(summary)
    if not rows and not run.ranks:
        return None
    labels = []
    for r in run.ranks:
        info = r.info.rank or RankInfo()
        labels.append((rank_label(info.rank, info.node), counted_steps(r.steps)))
    svg = plots.rank_heatmap_svg(labels)
    job = run.info.job or JobInfo()
    return {"rows": rows, "heatmap": Markup(svg) if svg else None,
            "heatmap_reason": "no rank has counted steps" if run.ranks else "the run folder holds no rank's records",
            "median_rank": job.median_rank, "world_size": job.world_size or len(rows),
            "nodes": [str(n) for n in job.nodes], "launcher": job.launcher,
            "job_id": job.id,
            "untraced": list(job.untraced)}


def _plots(run: Run, meta: RunMeta, summary: Summary,
           excluded: list[tuple[float, float, str]], phases: list[str] | None = None) -> list[dict[str, Any]]:
    """Each plot with its SVG (safe markup) or the reason it is absent."""
    absences = meta.absences
    window = counted_window_s(run.steps)
    samples = run.samples
    no_samples = _absence(absences, _SAMPLER_KEYS, "the system sampler recorded no samples in this run")
    if samples is not None and not samples.empty:
        no_samples = "the samples table has no values for this plot"
    steps_reason = "no counted steps (every recorded step was warm-up)" if len(run.steps) else "no steps recorded"
    items = [
        ("steps", "Step time breakdown", plots.step_breakdown_svg(step_breakdown(run.steps), phases), steps_reason,
         "Time per counted step in each phase, stacked; the red band is time spent waiting for data."),
        _prefetch_plot(run, summary),
        ("cpu", "CPU", plots.cpu_svg(samples, window, excluded), no_samples,
         "Top: whole machine, % of all cores. Bottom: training process and DataLoader workers, "
         "% of one core (200% = two cores busy). Grey: warm-up, not counted."),
        ("memory", "Memory", plots.memory_svg(samples, window, excluded), no_samples,
         "Resident set size of the training process and of all workers together; a page shared "
         "between processes counts once per process, so the workers' sum is an upper bound. "
         "Grey: warm-up, not counted."),
        ("disk", "Disk reads", plots.disk_svg(samples, window, excluded), _absence(absences, _DISK_KEYS, no_samples),
         "Bytes the process tree read from disk (page-cache hits excluded). Grey: warm-up, not counted."),
    ]
    items[:0] = _window_plots(summary)
    gpu_svg = plots.gpu_svg(samples, window, excluded) if meta.gpu.available else None
    items.append(("gpu", "GPU", gpu_svg, _gpu_reason(meta),
                  "GPU utilization and memory used over time. Grey: warm-up, not counted."))
    note = _not_counted_note(excluded, meta.loaders)
    return [
        {"id": key, "title": title, "svg": Markup(svg) if svg else None, "reason": reason,
         "caption": f"{caption} {note}" if note and key not in _STEP_AXIS_PLOTS else caption}
        for key, title, svg, reason, caption in items
    ]


def _window_plots(summary: Summary) -> list[tuple[str, str, str | None, str, str]]:
    """A light run's timeline of step times with its change point; an attach's sampled shares per window."""
    light, sampled = summary.light, summary.sampled
    if light is not None:
        cp = light.change_point
        svg = window_timeline_svg(light.timeline, [("step_median_s", "median step", plots.MAIN_COLOR),
                                                   ("step_p90_s", "p90 step", plots.WORKERS_COLOR)],
                                  "ms per step", 1e3, cp.t_s if cp is not None else None)
        caption = (f"Each window's median and p90 step time over the whole job (windows of {light.window_s} s)"
                   + (f"; dashed: the change point, step time ×{fmt.significant(cp.ratio, 3)}" if cp is not None else
                      f"; no change point ({light.change_point_test})") + ".")
        return [("timeline", "The whole job, window by window", svg, "no window with a counted step", caption)]
    if sampled is not None:
        svg = window_timeline_svg(sampled.timeline, [("data_wait_fraction", "data wait", "#d62728"),
                                                                    ("compute_fraction", "compute", plots.MAIN_COLOR)],
                                  "share of samples (%)", 100.0)
        return [("timeline", "Sampled shares, window by window", svg, "no window of samples",
                 "The training threads' share of py-spy's samples in each window (sampled, not timed).")]
    return []


_STEP_AXIS_PLOTS = ("steps", "prefetch")  # x is the counted step, so no time outside the steps is drawn
EVALUATION_LABEL = "evaluation passes (not counted)"
OTHER_LABEL = "outside the counted steps"
_MIN_SPAN_S = 1e-3  # shorter time left out of a step is not drawn (a fraction of a pixel on any run's chart)


def not_counted_spans(steps: Any, loaders: Any, timing: Any = "host-clock") -> list[tuple[float, float, str]]:
    """The time inside the counted window that no counted step holds, as (start_s, end_s, label) spans.

    A script's steps leave evaluation passes out (``pipeprof.script.event_steps``: a pass is taken out of the
    step it falls in), so a counted step then lasts longer, from its start to the next step's start, than its
    ``step_s``; that difference is the pass's time. It is drawn at the start of the step, where a pass between
    epochs falls (after the last optimizer step, before the next batch is asked for): within one step's
    counted time of where it was. A scenario run's steps follow each other, and none is drawn. With
    ``timing`` "cuda-events" (or "mixed") a step's ``step_s`` is the device's and its start the host's: their
    difference is the host running ahead, not time left out, and nothing is drawn.
    """
    if steps is None or len(steps) < 2 or timing in ("cuda-events", "mixed"):
        return []
    df = counted_steps(steps)
    t = df["t_start_s"].to_numpy(dtype=float)
    step_s = df["step_s"].to_numpy(dtype=float)
    consecutive = (df["step"].to_numpy()[1:] - df["step"].to_numpy()[:-1]) == 1
    left_out = t[1:] - t[:-1] - step_s[:-1]
    roles = {str(x.role) for x in LoaderInfo.parse_all(loaders)}
    label = EVALUATION_LABEL if "eval" in roles else OTHER_LABEL
    return [(float(a), float(a + d), label) for a, d, ok in zip(t[:-1], left_out, consecutive)
            if ok and d >= _MIN_SPAN_S]


def _not_counted_note(excluded: list[tuple[float, float, str]], loaders: Any) -> str:
    """The time charts' caption for the shaded spans; empty when there are none."""
    if not excluded:
        return ""
    names = sorted({str(x.name) for x in LoaderInfo.parse_all(loaders) if x.role == "eval"})
    total_s = sum(b - a for a, b, _ in excluded)
    whose = f" of {', '.join(names)}" if names else ""
    what = f"the evaluation passes{whose}" if excluded[0][2] == EVALUATION_LABEL else "time no counted step holds"
    return (f"Yellow: {what} ({fmt.duration(total_s)} in all), left out of the steps they fell in and of every "
            f"statistic; each is drawn at the start of its step.")


def _prefetch_plot(run: Run, summary: Summary) -> tuple[str, str, str | None, str, str]:
    prefetch = summary.attribution.prefetch
    reason = prefetch.absent or "no counted step has a ready_batches reading"
    svg = None if prefetch.absent is not None else plots.prefetch_queue_svg(counted_steps(run.steps),
                                                                             prefetch.capacity_batches)
    return ("prefetch", "Prefetch queue", svg, reason,
            "Batches already produced and waiting when each counted step called next(), against the queue's "
            "capacity (num_workers × prefetch_factor). Often empty: the workers are too slow; often full yet "
            "the loop still waits: the cost is in the training process receiving batches; full then empty: "
            "bursty supply.")


def _loading(run: Run, meta: RunMeta, summary: Summary,
             excluded: list[tuple[float, float, str]]) -> dict[str, Any]:
    """The Loading section: the summary's table per worker (``loading.by_worker``, the training process first),
    the timeline of the raw records and the split, or why they are absent."""
    loading = run.loading
    by_worker = summary.loading.by_worker if summary.loading is not None else {}
    rows = sorted(({**stats.to_json(), "worker": _worker_id(label)} for label, stats in by_worker.items()),
                  key=lambda r: r["worker"])
    if loading is None or loading.empty:
        reason = _absence(meta.absences, _LOADING_KEYS,
                          "this run has no loading records (it was recorded without worker-side timing)")
    else:
        reason = "no loading records for counted steps (every recorded batch fed a warm-up step)"
    timeline = plots.loading_timeline_svg(loading, counted_window_s(run.steps), excluded)
    split = plots.loading_split_svg(pd.DataFrame(rows))
    rows = [{**r, "name": plots.worker_name(r["worker"])} for r in rows]
    return {
        "rows": rows,
        "reason": reason,
        "not_counted": _not_counted_note(excluded, meta.loaders),
        "timeline": Markup(timeline) if timeline else None,
        "split": Markup(split) if split else None,
    }


def _worker_id(label: str) -> int:
    """summary.json's key of a worker ("main": the training process, else its id) as loading.csv's id."""
    return MAIN_PROCESS if label == "main" else int(label)


_GROUP_COLORS: dict[str | None, str] = {"loading": "#d62728", "transfer": "#ff7f0e", "compute": "#1f77b4", "waiting": "#c5b0d5",
                 "other": "#9e9e9e"}
_PROCESS_TITLES = {"main": "training process", "workers": "DataLoader workers"}


def _transforms(summary: Summary) -> list[dict[str, Any]]:
    """The "Inside the sample" section: per loader its title, chart, table rows and split line; [] (nothing
    rendered) when no transform or decode call was timed (``transform_view``)."""
    out = []
    for i, view in enumerate(loader_views(summary)):
        svg = bars_svg(view, f"transforms-{i}")
        out.append({"title": view.title, "svg": Markup(svg) if svg else None, "rows": table_rows(view),
                    "split": split_text(view.split)})
    return out


def _code_profile(summary: Summary) -> dict[str, Any] | None:
    """The Code-level view section (``summary.code_profile``, formatted); None when neither profiler was on."""
    code = summary.code_profile
    if code is None:
        return None
    cprofile, pyspy = code.cprofile, code.pyspy
    if str(cprofile.absent or "").startswith("off") and str(pyspy.absent or "").startswith("off"):
        return None
    return {"cprofile": _cprofile_view(cprofile), "pyspy": pyspy.recorded}


def _cprofile_view(cprofile: CProfileView) -> dict[str, Any]:
    if cprofile.absent is not None:
        return {"absent": cprofile.absent}
    overhead = cprofile.overhead or StepCost()
    first, steps = cprofile.first_step, cprofile.profiled_steps
    processes = []
    for key, info in cprofile.processes.items():
        processes.append({
            "key": key, "title": _PROCESS_TITLES.get(key, key), "absent": info.absent,
            "scope": info.scope or "", "profiled_s": format_duration(info.profiled_s),
            "workers": (f"{info.processes_profiled} of {info.processes_started} worker processes profiled"
                        if info.processes_started is not None else ""),
            "groups": [{"group": g, "color": _GROUP_COLORS.get(g, "#9e9e9e"), "fraction": info.groups.get(g)}
                       for g in _GROUP_COLORS if g in info.groups],
            "top": [{"function": t.function, "group": t.group, "color": _GROUP_COLORS.get(t.group, "#9e9e9e"),
                     "self": format_duration(t.self_s), "cum": format_duration(t.cum_s),
                     "share": format_fraction_pct(t.share), "calls": format_number(t.calls)}
                    for t in cprofile.top.get(key, ())],
        })
    if overhead.absent is not None:
        overhead_text = Markup('<span class="nm">not measured: {}</span>').format(overhead.absent)
    else:
        overhead_text = Markup("median step {} profiled vs {} not ({} and {} counted steps): ×{}").format(
            format_duration(overhead.median_step_in_window_s), format_duration(overhead.median_step_outside_s),
            format_number(overhead.steps_in_window), format_number(overhead.steps_outside),
            format_number(overhead.ratio, 2))
    return {"window": f"steps {first}–{int(first) + int(steps) - 1} ({steps} steps)"
            if isinstance(first, int) and isinstance(steps, int) and steps > 0 else "no steps",
            "overhead": overhead_text, "overhead_note": cprofile.overhead_note or "",
            "processes": processes, "files": list(cprofile.files.values())}


def _gpu_reason(meta: RunMeta) -> str:
    gpu, absences = meta.gpu, meta.absences
    if not gpu.available:
        return str(gpu.reason or _absence(absences, _GPU_KEYS, "no GPU was recorded for this run"))
    return _absence(absences, _GPU_KEYS, "a GPU was in use, but no GPU samples were recorded")


def _absence(absences: Mapping[str, Any], keys: Iterable[str], default: str) -> str:
    for key in keys:
        if absences.get(key):
            return str(absences[key])
    return default


def _script(meta: RunMeta) -> dict[str, Any] | None:
    """A profiled script's command, folder and end, and its loaders (None for a scenario run)."""
    if not meta.is_script:
        return None
    script = meta.script or ScriptInfo()
    hows: dict[Any, str] = {
        "exit": f"exit status {script.ended_detail}", "exception": f"raised {script.ended_detail}",
        "interrupted": "interrupted (KeyboardInterrupt)",
        "stopped": f"stopped by pipeprof after {script.ended_detail} steps (--steps)"}
    how = hows.get(script.ended_how)
    if how is None:
        code = script.returncode
        how = f"exit status {script.exit_status}" + (" (killed by a signal)" if code is not None and code < 0
                                                     else "") if code is not None else "not recorded"
    sources: dict[str | None, str] = {
        "optimizer": "optimizer.step() (PyTorch's global step hook)", "prof.step": "prof.step() marks",
        "backward": "backward passes (no torch.optim optimizer step was seen)",
        "optimizer and backward": "optimizer.step(), and backward passes where a fit had no optimizer step",
        "loader batches": "each batch of the training loader (no optimizer step was seen)"}
    return {"command_line": script.command_line, "cwd": script.cwd, "python": script.python,
            "ended": how, "loaders": [_loader_row(g) for g in fold_loaders(LoaderInfo.parse_all(meta.loaders))],
            "step_source": sources.get(meta.step_source, "no training steps")}


# Shown in the DataLoaders table's "built with" cell always; the other SETTINGS only when not the default.
_SHOWN_SETTINGS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
_DEFAULT_SETTINGS = {"drop_last": False, "multiprocessing_context": None}


def _loader_row(group: LoaderGroup) -> dict[str, Any]:
    """One line of the DataLoaders table: a loader, or loaders folded by name and settings (``each`` lists
    them one by one for the folded view)."""
    built = [f"{k}={_python(group.setting(k))}" for k in _SHOWN_SETTINGS]
    built += [f"{k}={_python(v)}" for k, v in group.settings
              if k in _DEFAULT_SETTINGS and v != _DEFAULT_SETTINGS[k]]
    each = [{"number": x.number, "batches": x.batches, "samples": x.samples, "passes": x.passes,
             "wait_per_batch_s": x.wait_per_batch_s, "fetch_per_sample_s": x.fetch_per_sample_s,
             "prep_per_sample_s": x.prep_per_sample_s, "eval_s": x.eval_s} for x in group.loaders]
    return {"name": group.name, "role": group.role, "count": group.count, "dataset": group.setting("dataset"),
            "built": built, "batches": group.batches, "samples": group.samples, "passes": group.passes,
            "wait_per_batch_s": group.wait_per_batch_s, "fetch_per_sample_s": group.fetch_per_sample_s,
            "prep_per_sample_s": group.prep_per_sample_s, "eval_s": group.eval_s, "each": each}


def _python(value: Any) -> str:
    """A DataLoader argument as the script's Python writes it: ``True``, ``None``, ``64``, ``'spawn'``."""
    return repr(value)


def _scenario_sections(recorded: JsonObject | None) -> list[tuple[str, list[tuple[str, str]]]]:
    """Top-level scalars as a "scenario" section, then one section per table (run.json's ``scenario``)."""
    scenario = recorded or {}
    top = [(k, v) for k, v in scenario.items() if not isinstance(v, dict)]
    sections = [("scenario", _rows(dict(top)))] if top else []
    sections += [(k, _rows(v)) for k, v in scenario.items() if isinstance(v, dict)]
    return sections


def _rows(data: JsonObject, prefix: str = "") -> list[tuple[str, str]]:
    """(key, display text) pairs of a JSON object as run.json recorded it; nested tables flatten to dotted keys."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows += _rows(value, prefix=f"{name}.")
        else:
            rows.append((name, _display(name, value)))
    return rows


def _display(key: str, value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key.endswith("_bytes"):
        return f"{format_bytes(value)} ({value:,.0f} bytes)"
    return fmt.setting(value)



# -- number formatting (Jinja filters over pipeprof.format) -------------------


def _missing(value: Any) -> bool:
    return isinstance(value, Undefined) or finite(value) is None


_NOT_MEASURED_HTML = Markup('<span class="nm">{}</span>').format(NOT_MEASURED)


def format_number(value: Any, digits: int | None = None) -> str:
    """``pipeprof.format.number``: 1234.5 → "1,234"; 12.34 → "12.3"; 0.01234 → "0.0123"; None → not measured."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.number(value, digits)


def format_significant(value: Any) -> str:
    """``pipeprof.format.significant``, for rates without their unit: 4.3 → "4.3"; 37176.4 → "37,176"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.significant(value)


def format_fraction_pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.3 → "30.0%"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.pct(value, digits)


def format_pct(value: Any, digits: int = 0) -> str:
    """A value already in percent: 153.2 → "153%"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.pct(float(value) / 100, digits)


def format_duration(value: Any) -> str:
    """``pipeprof.format.duration``: 1.23e-05 → "12.3 µs"; 0.0123 → "12.3 ms"; 4.5 → "4.50 s"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.duration(value)


def format_bytes(value: Any) -> str:
    """Binary units: 536870912 → "512 MiB"; 1.5 * 2**30 → "1.50 GiB"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.byte_size(value)


def format_byte_rate(value: Any) -> str:
    """Bytes per second, in MiB/s: 10485760 → "10.0 MiB/s"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.byte_rate(value)


def format_rate(value: Any, unit: str = "samples/s") -> str:
    """A rate with its unit: 1234.5 → "1,234 samples/s"."""
    return _NOT_MEASURED_HTML if _missing(value) else fmt.rate(value, unit)


def _css_width(fraction: Any) -> str:
    """A fraction as a CSS percentage width, clamped to 0–100."""
    if _missing(fraction):
        return "0%"
    return f"{min(100.0, max(0.0, 100 * float(fraction))):.3f}%"


# The filters every page's template formats with (pages may add their own).
FILTERS = {"num": format_number, "sig": format_significant, "pct": format_fraction_pct, "percent": format_pct,
           "duration": format_duration,
           "bytes": format_bytes, "byte_rate": format_byte_rate, "rate": format_rate, "plural": fmt.plural,
           "css_width": _css_width, "setting": fmt.setting}


def measured(value: Any) -> bool:
    """The templates' ``is measured`` test: a finite number."""
    return not _missing(value)
