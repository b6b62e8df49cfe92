"""A recommendation's change and its predicted speed-up with its interval, as the terminal and the report write them.

``×1.80 (1.50–2.10), measured`` for a certain gain, its tier after it (``measured`` or ``estimated``, summary.json's
``tier``); ``×1.05 (may not help: ×0.97–1.12), estimated`` where the interval reaches x1.0 (``interval.may_not_help``,
``pipeprof.analysis.intervals``); ``×1.80`` alone for a summary without bounds or tier (from before them);
``not predicted: try --verify or tune`` for a change nothing measured carries.
"""

from __future__ import annotations

from pipeprof import format as fmt
from pipeprof.analysis.intervals import Interval
from pipeprof.analysis.recommend import Recommendation
from pipeprof.numbers import finite
from pipeprof.render.advice_text import code_text
from pipeprof.render.script_text import script_words

MAY_NOT_HELP = "may not help"
NOT_PREDICTED = "not predicted: try --verify or tune"


def change_text(rec: Recommendation) -> str:
    """A recommendation's change as command-line text: ``--set loader.num_workers=2 ...`` (for a script: the
    Python to change, ``script_text``), the code change, or ``no change``."""
    if rec.script_text is not None and (words := script_words(rec.script_text)):
        return words
    if rec.change:
        return " ".join(f"--set {key}={fmt.setting_arg(value)}" for key, value in rec.change.items())
    code = code_text(rec.code_change) if rec.code_change is not None else ""
    return f"code: {code}" if code else "no change"


def speedup_text(rec: Recommendation, interval: Interval | None, *, missing: str = fmt.NOT_MEASURED) -> str:
    """``×1.80 (1.50–2.10)``, ``×1.05 (may not help: ×0.97–1.12)``, ``×1.80``; ``missing`` when not predicted."""
    speedup = finite(rec.predicted_speedup)
    if speedup is None:
        return NOT_PREDICTED if rec.tier == "not_predicted" else missing
    text = f"×{fmt.number(speedup, 2)}"
    if interval is not None and interval.speedup is not None:
        span = f"{fmt.number(interval.speedup[0], 2)}–{fmt.number(interval.speedup[1], 2)}"
        text = f"{text} ({MAY_NOT_HELP}: ×{span})" if interval.may_not_help else f"{text} ({span})"
    change = rec.change or rec.code_change  # the honest negative: no tier to say
    return f"{text}, {rec.tier}" if rec.tier in ("measured", "estimated") and change else text
