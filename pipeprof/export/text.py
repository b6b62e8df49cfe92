"""The words an export sends with the numbers: the verdict and the top recommendations, as Markdown.

A renderer (words at the edge): the same phrasing as the terminal's summary
(``pipeprof.render.console``), over summary.json's verdict and
recommendations; TensorBoard's text tab, MLflow's artifacts and W&B's summary
show it as written.
"""

from __future__ import annotations

from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.intervals import Interval
from pipeprof.analysis.recommend import Recommendation
from pipeprof.export.series import ExportSeries
from pipeprof.render.interval_text import change_text, speedup_text
from pipeprof.run_folder import as_dict

TOP_RECOMMENDATIONS = 3


def verdict_text(summary: dict[str, Any]) -> str:
    """The verdict: its class and sentence, its notes; the bottleneck's reason for a run without a verdict."""
    verdict = as_dict(summary.get("verdict"))
    if not verdict.get("class"):
        return f"No verdict: {summary.get('bottleneck_reason') or 'the run has too few counted steps'}"
    lines = [f"**{verdict['class']}**: {verdict.get('sentence') or ''}".strip()]
    lines += [f"- note: {note}" for note in verdict.get("notes") or []]
    return "\n".join(lines)


def recommendations_text(summary: dict[str, Any], top: int = TOP_RECOMMENDATIONS) -> str:
    """The first ``top`` recommendations, one numbered item each: the change, the predicted rate, why."""
    recs = [r for r in summary.get("recommendations") or [] if isinstance(r, dict)][:top]
    if not recs:
        return "No recommendation."
    items = []
    for i, rec in enumerate(recs, start=1):
        typed = Recommendation.from_json(rec)
        speedup = speedup_text(typed, Interval.from_json(rec.get("interval")), missing="")
        items.append(f"{i}. `{change_text(typed)}` → {fmt.rate(rec.get('predicted_samples_per_s'), missing='not predicted')}"
                     + (f", {speedup}" if speedup else "") + f": {rec.get('reason') or ''}")
    return "\n".join(items)


def absent_text(series: ExportSeries) -> str:
    """What the export could not send, and why."""
    return "\n".join(f"- {group}: {reason}" for group, reason in series.absent) or "Nothing absent."


def export_texts(summary: dict[str, Any], series: ExportSeries) -> dict[str, str]:
    """Tag → Markdown: ``pipeprof/verdict``, ``pipeprof/recommendations``, ``pipeprof/absent``."""
    return {"pipeprof/verdict": verdict_text(summary), "pipeprof/recommendations": recommendations_text(summary),
            "pipeprof/absent": absent_text(series)}
