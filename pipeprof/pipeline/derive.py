"""Derive a run's summary and its files (summary.json, report.html) from its raw records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeprof.analysis.light_summary import is_light, light_summary
from pipeprof.analysis.summary import Summary, summary_record
from pipeprof.attach.summary import is_sampled, sampled_summary
from pipeprof.render.advice_text import recommendation_words
from pipeprof.render.cache_text import cache_json, cache_words
from pipeprof.render.html import render_html
from pipeprof.render.straggler_text import straggler_words
from pipeprof.render.verdict_text import bottleneck_words, verdict_json
from pipeprof.render.verification_text import verification_words
from pipeprof.run_folder import Run, to_json, write_text


def derived_files(run: Run, folder_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary of ``run`` and the derived files (summary.json, report.html) as text."""
    # attached from outside: sampled shares; profile --light: window aggregates only
    record = sampled_summary(run) if is_sampled(run) else light_summary(run) if is_light(run) else summary_record(run)
    summary = summary_document(record)
    return summary, {"summary.json": to_json(summary),
                     "report.html": render_html(run, record, folder_name=folder_name)}


def summary_document(record: Summary) -> dict[str, Any]:
    """summary.json: the summary's data (``Summary.to_json``) and the sentences written here, at the edge, by
    render's text modules (``bottleneck_reason``, each verdict's ``sentence`` and ``notes``, the page-cache
    check's ``reason``, ``verification.verdict_words``; each recommendation's ``reason``, ``model`` and
    ``note``; ``straggler.sentence``)."""
    summary = record.to_json()
    summary["bottleneck_reason"] = bottleneck_words(record.bottleneck_why)
    summary["verdict"] = verdict_json(record.verdict)
    if record.cache is not None:
        summary["cache"] = cache_json(record.cache)
    if record.attribution.cache.absent is None:
        summary["attribution"]["cache"]["reason"] = cache_words(record.attribution.cache.reason)
    for entry, written in zip(record.ranks, summary["ranks"], strict=True):
        written["verdict"] = verdict_json(entry.verdict)
    for entry, rec in zip(summary["recommendations"], record.recommendations, strict=True):
        entry.update(recommendation_words(rec))
    if record.straggler is not None:
        summary["straggler"]["sentence"] = straggler_words(record.straggler)
    if record.verification is not None:
        summary["verification"]["verdict_words"] = verification_words(record.verification)
    return summary


def summarize(run: Run, probe: dict[str, Any] | None = None) -> dict[str, Any]:
    """summary.json for ``run`` (one process or a job of ranks; ``analysis.summary.summary_record``)."""
    return summary_document(summary_record(run, probe))


def rederive(run: Run, folder: Path) -> dict[str, Any]:
    """Write summary.json and report.html of ``run`` into its ``folder`` again; the summary."""
    summary, files = derived_files(run, folder.name)
    for name, text in files.items():
        write_text(folder / name, text)
    return summary
