"""The terminal summary: one compact rich table printed after a run.

Each value carries its unit, formatted by ``pipeprof.format``. Every cell is a ``rich.text.Text``
so scenario names, reasons and paths are never parsed as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.analysis.code_view import CodeView
from pipeprof.analysis.sections import LightSection
from pipeprof.analysis.summary import Summary, as_summary
from pipeprof.format import NOT_MEASURED
from pipeprof.numbers import finite as _value
from pipeprof.numbers import scaled
from pipeprof.render.advice_text import note_text, reason_text
from pipeprof.render.cache_text import cache_words
from pipeprof.render.interval_text import change_text, speedup_text
from pipeprof.render.loaders import LoaderGroup, fold_loaders
from pipeprof.render.ranks import straggler_line
from pipeprof.render.transform_view import eval_transforms_lines, transforms_line
from pipeprof.render.verdict_text import bottleneck_words, verdict_notes, verdict_sentence
from pipeprof.run_meta import LoaderInfo, ScriptInfo

# summary.json's bottleneck is the verdict's class in coarse form (input:* -> input): one style for both.
_BOTTLENECK_STYLE: dict[str | None, str] = {"input": "bold red", "compute": "bold green", "balanced": "bold yellow",
                                             "h2d": "bold red"}
_VERDICT_STYLE = _BOTTLENECK_STYLE


def summary_table(summary: Summary | Mapping[str, Any], folder: str | Path) -> Table:
    """The summary of one run as a two-column table (label, value with its unit); a summary.json's dict is read
    back first (``as_summary``)."""
    s = as_summary(summary)
    step, frac, cpu, memory = s.step_time_s, s.fractions, s.cpu, s.memory
    loading = s.loading
    klass = s.bottleneck

    table = Table(title=Text(f"pipeprof: {s.scenario or 'run'}", style="bold"),
                  show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("measure", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")

    def add(label: str, value: str, style: str = "") -> None:
        table.add_row(Text(label), Text(value, style=style if value != NOT_MEASURED else "dim italic"))

    script = ScriptInfo.parse(s.script.script) if s.script else None  # read once, typed
    loaders = LoaderInfo.parse_all(s.script.loaders) if s.script else ()
    if script is not None and script.recorded:
        add("script", str(script.command_line or NOT_MEASURED))
        add("loaders", ", ".join(_loader_group_text(g) for g in fold_loaders(loaders))
            or ("not visible from outside (attached)" if s.sampled else "none iterated"))
    else:
        add("scenario", s.scenario or NOT_MEASURED)
    sampled = s.sampled  # pipeprof attach: shares of py-spy's samples, no step timed
    of = "sampled share, 95% interval" if sampled is not None else "share of step time"
    if sampled is not None:
        add("sampled", f"{fmt.number(sampled.training_samples, 0)} samples of the training threads at "
                       f"{sampled.rate_hz} Hz over {fmt.duration(sampled.sampled_s)} (py-spy, from "
                       "outside): the shares below are sampled; steps and throughput cannot be measured so")
    add("steps (counted)", fmt.number(s.steps, 0))
    add("throughput", fmt.rate(s.samples_per_s), "bold")
    add("step time median / p90", _several(fmt.duration, step.median, step.p90))

    def share(part: str, key: str) -> str:
        text = fmt.pct(frac.get(part), 1)
        shared = sampled.training.get(key) if sampled is not None else None
        interval = shared.interval if shared is not None else None
        if interval is not None:
            text += f" [{fmt.pct(interval[0], 0)}, {fmt.pct(interval[1], 0)}]"
        return text

    add(f"data wait ({of})", share("data_wait", "data_wait"), _BOTTLENECK_STYLE.get(klass, ""))
    add(f"host → device ({of})", share("h2d", "h2d"))
    if (_value(frac.get("collective_wait")) or 0.0) > 0:  # one process never waits in collectives: no row
        add(f"collective wait ({of})", share("collective_wait", "collective"))
    add(f"compute ({of})", share("compute", "compute"))
    add(f"other ({of})", share("other", "other"))
    add("bottleneck", bottleneck_words(s.bottleneck_why) or klass or NOT_MEASURED, _BOTTLENECK_STYLE.get(klass, ""))
    verdict = s.verdict
    family = "input" if verdict.klass.startswith("input:") else verdict.klass
    text = f"{verdict.klass}: {verdict_sentence(verdict)}".strip()
    text += "".join(f"\nnote: {note}" for note in verdict_notes(verdict))
    median = s.job.median_rank if s.ranks and s.job is not None else None
    add("verdict" if not s.ranks else f"verdict (rank {median}, the median)" if median is not None
        else "verdict (the median rank)", text, _VERDICT_STYLE.get(family, ""))
    straggler = straggler_line(s)
    if straggler is not None:  # a job of ranks: which one sets the pace, and why
        add("straggler", straggler, "bold red" if s.straggler is not None and s.straggler.rank is not None else "")
    if s.recommendations:
        top, interval = s.recommendations[0], s.intervals[0] if s.intervals else None
        speedup = speedup_text(top, interval, missing="")
        text = (f"{change_text(top)} → {fmt.rate(top.predicted_samples_per_s, missing='not predicted')}"
                + (f", {speedup}" if speedup else "") + f": {reason_text(top.reason)}")
        note = note_text(top.note)
        if note:  # e.g. the caveat of a run that ended early
            text += f"\nnote: {note}"
        certain = bool(top.change or top.code_change) and not (interval is not None and interval.may_not_help)
        add("top recommendation", text, "bold" if certain else "")
    split = loading.split if loading is not None else None
    if split is not None and loading is not None:  # decode and transforms timed inside __getitem__
        add("fetch/decode/transform/other per sample",
            _several(fmt.duration, split.fetch_per_sample_s, split.decode_per_sample_s, split.transform_per_sample_s,
                     split.other_per_sample_s))
        add("collate per sample", fmt.duration(loading.collate_per_sample_s))
    else:
        add("fetch/prep/collate per sample",
            _several(fmt.duration, *((loading.fetch_per_sample_s, loading.prep_per_sample_s,
                                      loading.collate_per_sample_s) if loading is not None else (None,))))
    burst = next((d.wait_by_position_s for d in loaders if d.role == "train" and d.wait_by_position_s), None)
    if burst:  # steps of several batches (gradient accumulation): where in the step the waits fall
        add("wait by batch in the step", " / ".join(fmt.duration(w) for w in burst))
    transforms = transforms_line(s)
    if transforms:  # issue 18: the training loader's costliest transforms and its decode, measured
        add("transforms", transforms)
    for name, line in eval_transforms_lines(s):  # each evaluation loader's, apart from training's
        add(f"transforms, {name} (eval)", line)
    if loading is not None:  # unknown where schedstat cannot be read (fetch holds it then), never a silent 0
        add("waiting for a core per sample",
            fmt.duration(loading.core_wait_per_sample_s, missing="unknown (counted in fetch)"))
    code = _code_profile_line(s.code_profile)
    if code:
        add("code profile", code)
    cache = s.cache
    if cache is not None and cache.cache == "cold":
        add("page cache", f"cold: {cache_words(cache.reason)}", "bold red" if cache.verified is False else "")
    add("CPU mean / peak (of all cores)",
        _several(lambda percent: fmt.pct(scaled(percent, 0.01), 0),
                 cpu.mean_util, cpu.peak_util))
    add("peak RSS", fmt.byte_size(memory.peak_rss_bytes))
    add("accuracy", fmt.pct(s.accuracy, 1))
    add("final loss", fmt.number(s.final_loss, 4))
    light = s.light
    if light is not None:  # profile --light: the whole job's timeline of window medians, and its change point
        add("timeline (median step time)", light_timeline(light))
        cp = light.change_point
        add("change point", (f"at {fmt.duration(cp.t_s)}: step time {fmt.duration(cp.before_s)} → "
                             f"{fmt.duration(cp.after_s)} (×{fmt.significant(cp.ratio, 3)}, "
                             f"{fmt.significant(cp.sigmas, 2)} standard errors)") if cp is not None else
            f"none ({light.windows} windows; test: {light.change_point_test})")
    add("run folder", str(folder))
    return table


def print_summary(summary: Summary | Mapping[str, Any], folder: str | Path, console: Console | None = None) -> None:
    """Print ``summary_table`` to ``console`` (a new stdout Console when None)."""
    (console or Console()).print(summary_table(summary, folder))


_NOT_ASKED = ("off", "not recorded")  # a profiler not asked for (a scenario's 0) or not offered (a script)


def _code_profile_line(code: CodeView | None) -> str | None:
    """cProfile's group shares per process and its cost, and py-spy's file; None when both were off."""
    if code is None:
        return None
    parts = []
    cprofile, pyspy = code.cprofile, code.pyspy
    if cprofile.absent is None and (cprofile.processes or cprofile.overhead is not None):
        for name, info in cprofile.processes.items():
            groups = sorted(info.groups.items(), key=lambda gv: -gv[1])
            shares = ", ".join(f"{g} {fmt.pct(v, 1)}" for g, v in groups[:3] if v >= 0.005)
            parts.append(f"{name}: {shares or info.absent or NOT_MEASURED}")
        overhead = cprofile.overhead
        ratio = overhead.ratio if overhead is not None else None
        outside = overhead.steps_outside if overhead is not None else None
        parts.append(f"profiled steps ×{fmt.number(ratio, 2)} the others" if ratio is not None else
                     f"cost not measured: too few steps outside the window to compare ({int(outside)})"
                     if outside is not None else "cost not measured")
    elif not (cprofile.absent or "off").startswith(_NOT_ASKED):
        parts.append(f"cProfile: {cprofile.absent}")
    if pyspy.recorded and not str(pyspy.absent if "absent" in pyspy.recorded else "").startswith(_NOT_ASKED):
        parts.append(f"py-spy: {pyspy.file}" if pyspy.file else f"py-spy: {pyspy.absent}")
    return "; ".join(parts) or None


# -- formatting ----------------------------------------------------------------



def _loader_group_text(group: LoaderGroup) -> str:
    """``train_loader (train, 20 batches)``; loaders re-created with the same name and settings on one line:
    ``train_loader ×10 (train: 10 loaders, 10 passes, 200 batches)``."""
    batches = fmt.plural(group.batches, "batch", "batches")
    if group.count == 1:
        return f"{group.name} ({group.role}, {batches})"
    return (f"{group.name} ×{group.count} ({group.role}: {fmt.plural(group.count, 'loader')}, "
            f"{fmt.plural(group.passes, 'pass', 'passes')}, {batches})")


SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40


def light_timeline(light: LightSection) -> str:
    """The windows' median step times as a sparkline of at most SPARK_WIDTH cells (a cell: the mean of its
    windows), with the range it spans."""
    values = [v for v in (_value(w.step_median_s) for w in light.timeline) if v is not None]
    if not values:
        return NOT_MEASURED
    per = max(1, -(-len(values) // SPARK_WIDTH))
    cells = [sum(values[i:i + per]) / len(values[i:i + per]) for i in range(0, len(values), per)]
    lo, hi = min(cells), max(cells)
    line = "".join(SPARK[min(len(SPARK) - 1, int((c - lo) / (hi - lo) * len(SPARK))) if hi > lo else 0] for c in cells)
    return f"{line} {fmt.duration(lo)}–{fmt.duration(hi)}"


def _several(text: Any, *values: Any) -> str:
    """``a / b`` with each value formatted by ``text``; one "not measured" when none is measured."""
    if all(_value(v) is None for v in values):
        return NOT_MEASURED
    return " / ".join(text(v) for v in values)


