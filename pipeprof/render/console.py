"""The terminal summary: one compact rich table printed after a run.

Each value carries its unit, formatted by ``pipeprof.format``. Every cell is a ``rich.text.Text``
so scenario names, reasons and paths are never parsed as rich markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeprof import format as fmt
from pipeprof.analysis.advice_text import set_text
from pipeprof.format import NOT_MEASURED
from pipeprof.numbers import finite as _value
from pipeprof.numbers import scaled
from pipeprof.render.interval_text import may_not_help, speedup_text
from pipeprof.render.loaders import LoaderGroup, fold_loaders
from pipeprof.render.ranks import straggler_line
from pipeprof.render.transform_view import eval_transforms_lines, transforms_line
from pipeprof.resource_use import CpuUse, MemoryUse
from pipeprof.run_folder import as_dict

# summary.json's bottleneck is the verdict's class in coarse form (input:* -> input): one style for both.
_BOTTLENECK_STYLE: dict[str | None, str] = {"input": "bold red", "compute": "bold green", "balanced": "bold yellow",
                                             "h2d": "bold red"}
_VERDICT_STYLE = _BOTTLENECK_STYLE


def summary_table(summary: dict[str, Any], folder: str | Path) -> Table:
    """The summary of one run as a two-column table (label, value with its unit)."""
    s = summary
    step = as_dict(s.get("step_time_s"))
    frac = as_dict(s.get("fractions"))
    cpu = CpuUse.from_json(s.get("cpu"))
    memory = MemoryUse.from_json(s.get("memory"))
    loading = as_dict(s.get("loading"))
    klass = s.get("bottleneck")

    table = Table(title=Text(f"pipeprof: {s.get('scenario') or 'run'}", style="bold"),
                  show_header=False, box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("measure", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")

    def add(label: str, value: str, style: str = "") -> None:
        table.add_row(Text(label), Text(value, style=style if value != NOT_MEASURED else "dim italic"))

    script = as_dict(s.get("script"))
    if script:
        add("script", str(script.get("command_line") or NOT_MEASURED))
        add("loaders", ", ".join(_loader_group_text(g) for g in fold_loaders(s.get("loaders") or []))
            or ("not visible from outside (attached)" if s.get("sampled") else "none iterated"))
    else:
        add("scenario", str(s.get("scenario") or NOT_MEASURED))
    sampled = as_dict(s.get("sampled"))  # pipeprof attach: shares of py-spy's samples, no step timed
    of = "sampled share, 95% interval" if sampled else "share of step time"
    if sampled:
        attached = as_dict(sampled.get("attach"))
        add("sampled", f"{fmt.number(sampled.get('training_samples'), 0)} samples of the training threads at "
                       f"{attached.get('rate_hz')} Hz over {fmt.duration(attached.get('sampled_s'))} (py-spy, from "
                       "outside): the shares below are sampled; steps and throughput cannot be measured so")
    add("steps (counted)", fmt.number(s.get("steps"), 0))
    add("throughput", fmt.rate(s.get("samples_per_s")), "bold")
    add("step time median / p90", _several(fmt.duration, step.get("median"), step.get("p90")))

    def share(part: str, key: str) -> str:
        text = fmt.pct(frac.get(part), 1)
        interval = as_dict(as_dict(sampled.get("training")).get(key)).get("interval")
        if isinstance(interval, list) and len(interval) == 2:
            text += f" [{fmt.pct(interval[0], 0)}, {fmt.pct(interval[1], 0)}]"
        return text

    add(f"data wait ({of})", share("data_wait", "data_wait"), _BOTTLENECK_STYLE.get(klass, ""))
    add(f"host → device ({of})", share("h2d", "h2d"))
    if (_value(frac.get("collective_wait")) or 0.0) > 0:  # one process never waits in collectives: no row
        add(f"collective wait ({of})", share("collective_wait", "collective"))
    add(f"compute ({of})", share("compute", "compute"))
    add(f"other ({of})", share("other", "other"))
    add("bottleneck", str(s.get("bottleneck_reason") or klass or NOT_MEASURED), _BOTTLENECK_STYLE.get(klass, ""))
    verdict = as_dict(s.get("verdict"))
    if verdict.get("class"):
        family = "input" if str(verdict["class"]).startswith("input:") else str(verdict["class"])
        text = f"{verdict['class']}: {verdict.get('sentence') or ''}".strip()
        text += "".join(f"\nnote: {note}" for note in verdict.get("notes") or [])
        median = as_dict(s.get("job")).get("median_rank") if s.get("ranks") else None
        add("verdict" if not s.get("ranks") else f"verdict (rank {median}, the median)" if median is not None
            else "verdict (the median rank)", text, _VERDICT_STYLE.get(family, ""))
    straggler = straggler_line(s)
    if straggler is not None:  # a job of ranks: which one sets the pace, and why
        add("straggler", straggler, "bold red" if as_dict(s.get("straggler")).get("rank") is not None else "")
    recs = s.get("recommendations")
    if isinstance(recs, list) and recs and isinstance(recs[0], dict):
        top = recs[0]
        speedup = speedup_text(top, missing="")
        text = (f"{set_text(top)} → {fmt.rate(top.get('predicted_samples_per_s'), missing='not predicted')}"
                + (f", {speedup}" if speedup else "") + f": {top.get('reason') or ''}")
        if top.get("note"):  # e.g. the caveat of a run that ended early
            text += f"\nnote: {top['note']}"
        certain = bool(as_dict(top.get("change")) or top.get("code_change")) and not may_not_help(top)
        add("top recommendation", text, "bold" if certain else "")
    split = as_dict(loading.get("split"))
    if split:  # issue 18: decode and transforms timed inside __getitem__
        add("fetch/decode/transform/other per sample",
            _several(fmt.duration, *(split.get(f"{k}_per_sample_s") for k in ("fetch", "decode", "transform", "other"))))
        add("collate per sample", fmt.duration(loading.get("collate_per_sample_s")))
    else:
        add("fetch/prep/collate per sample",
            _several(fmt.duration, *(loading.get(k) for k in ("fetch_per_sample_s", "prep_per_sample_s",
                                                               "collate_per_sample_s"))))
    burst = next((d.get("wait_by_position_s") for d in s.get("loaders") or []
                  if isinstance(d, dict) and d.get("role") == "train" and d.get("wait_by_position_s")), None)
    if burst:  # steps of several batches (gradient accumulation): where in the step the waits fall
        add("wait by batch in the step", " / ".join(fmt.duration(w) for w in burst))
    transforms = transforms_line(s)
    if transforms:  # issue 18: the training loader's costliest transforms and its decode, measured
        add("transforms", transforms)
    for name, line in eval_transforms_lines(s):  # each evaluation loader's, apart from training's
        add(f"transforms, {name} (eval)", line)
    if loading:  # unknown where schedstat cannot be read (fetch holds it then), never a silent 0
        add("waiting for a core per sample",
            fmt.duration(loading.get("core_wait_per_sample_s"), missing="unknown (counted in fetch)"))
    code = _code_profile_line(as_dict(s.get("code_profile")))
    if code:
        add("code profile", code)
    cache = as_dict(s.get("cache"))
    if cache.get("cache") == "cold":
        verified = cache.get("verified")
        add("page cache", f"cold: {cache.get('reason')}", "bold red" if verified is False else "")
    add("CPU mean / peak (of all cores)",
        _several(lambda percent: fmt.pct(scaled(percent, 0.01), 0),
                 cpu.mean_util, cpu.peak_util))
    add("peak RSS", fmt.byte_size(memory.peak_rss_bytes))
    add("accuracy", fmt.pct(s.get("accuracy"), 1))
    add("final loss", fmt.number(s.get("final_loss"), 4))
    light = as_dict(s.get("light"))
    if light:  # profile --light: the whole job's timeline of window medians, and its change point
        add("timeline (median step time)", light_timeline(light))
        cp = as_dict(light.get("change_point"))
        add("change point", (f"at {fmt.duration(cp.get('t_s'))}: step time {fmt.duration(cp.get('before_s'))} → "
                             f"{fmt.duration(cp.get('after_s'))} (×{fmt.significant(cp.get('ratio'), 3)}, "
                             f"{fmt.significant(cp.get('sigmas'), 2)} standard errors)") if cp else
            f"none ({light.get('windows')} windows; test: {light.get('change_point_test')})")
    add("run folder", str(folder))
    return table


def print_summary(summary: dict[str, Any], folder: str | Path, console: Console | None = None) -> None:
    """Print ``summary_table`` to ``console`` (a new stdout Console when None)."""
    (console or Console()).print(summary_table(summary, folder))


_NOT_ASKED = ("off", "not recorded")  # a profiler not asked for (a scenario's 0) or not offered (a script)


def _code_profile_line(code: dict[str, Any]) -> str | None:
    """cProfile's group shares per process and its cost, and py-spy's file; None when both were off."""
    parts = []
    cprofile, pyspy = as_dict(code.get("cprofile")), as_dict(code.get("pyspy"))
    if "absent" not in cprofile and cprofile:
        for name, info in as_dict(cprofile.get("processes")).items():
            groups = sorted(as_dict(as_dict(info).get("groups")).items(), key=lambda gv: -(_value(gv[1]) or 0))
            shares = ", ".join(f"{g} {fmt.pct(v, 1)}" for g, v in groups[:3] if (_value(v) or 0) >= 0.005)
            parts.append(f"{name}: {shares or as_dict(info).get('absent') or NOT_MEASURED}")
        overhead = as_dict(cprofile.get("overhead"))
        ratio = _value(overhead.get("ratio"))
        outside = _value(overhead.get("steps_outside"))
        parts.append(f"profiled steps ×{fmt.number(ratio, 2)} the others" if ratio is not None else
                     f"cost not measured: too few steps outside the window to compare ({int(outside)})"
                     if outside is not None else "cost not measured")
    elif not str(cprofile.get("absent", "off")).startswith(_NOT_ASKED):
        parts.append(f"cProfile: {cprofile['absent']}")
    if pyspy and not str(pyspy.get("absent", "")).startswith(_NOT_ASKED):
        parts.append(f"py-spy: {pyspy['file']}" if pyspy.get("file") else f"py-spy: {pyspy.get('absent')}")
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


def light_timeline(light: dict[str, Any]) -> str:
    """The windows' median step times as a sparkline of at most SPARK_WIDTH cells (a cell: the mean of its
    windows), with the range it spans."""
    values = [v for v in (_value(as_dict(w).get("step_median_s")) for w in light.get("timeline") or [])
              if v is not None]
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


