"""The words an export sends with the numbers: the verdict and the top recommendations, as Markdown.

A renderer (words at the edge): the same phrasing as the terminal's summary
(``pipeprof.render.console``) and summary.json, over the summary's verdict and
recommendations; TensorBoard's text tab, MLflow's artifacts and W&B's summary
show it as written.
"""

from __future__ import annotations

from pipeprof import format as fmt
from pipeprof.analysis.summary import Summary
from pipeprof.export.series import ExportSeries
from pipeprof.render.advice_text import reason_text
from pipeprof.render.interval_text import change_text, speedup_text
from pipeprof.render.verdict_text import bottleneck_words, verdict_notes, verdict_sentence

TOP_RECOMMENDATIONS = 3


def verdict_text(summary: Summary) -> str:
    """The verdict: its class and sentence, its notes; the bottleneck's reason for a run without a verdict."""
    verdict = summary.verdict
    if not verdict.klass:
        return f"No verdict: {bottleneck_words(summary.bottleneck_why) or 'the run has too few counted steps'}"
    lines = [f"**{verdict.klass}**: {verdict_sentence(verdict)}".strip()]
    lines += [f"- note: {note}" for note in verdict_notes(verdict)]
    return "\n".join(lines)


def recommendations_text(summary: Summary, top: int = TOP_RECOMMENDATIONS) -> str:
    """The first ``top`` recommendations, one numbered item each: the change, the predicted rate, why."""
    if not summary.recommendations:
        return "No recommendation."
    intervals = summary.intervals if len(summary.intervals) == len(summary.recommendations) else ()
    items = []
    for i, rec in enumerate(summary.recommendations[:top], start=1):
        speedup = speedup_text(rec, intervals[i - 1] if intervals else None, missing="")
        items.append(f"{i}. `{change_text(rec)}` → {fmt.rate(rec.predicted_samples_per_s, missing='not predicted')}"
                     + (f", {speedup}" if speedup else "") + f": {reason_text(rec.reason)}")
    return "\n".join(items)


def absent_text(series: ExportSeries) -> str:
    """What the export could not send, and why."""
    return "\n".join(f"- {group}: {reason}" for group, reason in series.absent) or "Nothing absent."


def export_texts(summary: Summary, series: ExportSeries) -> dict[str, str]:
    """Tag → Markdown: ``pipeprof/verdict``, ``pipeprof/recommendations``, ``pipeprof/absent``."""
    return {"pipeprof/verdict": verdict_text(summary), "pipeprof/recommendations": recommendations_text(summary),
            "pipeprof/absent": absent_text(series)}
