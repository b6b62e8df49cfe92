"""Words at the edge for recommendations, predictions and the straggler: every kind of ``Reason`` that
analysis builds has a sentence in render/, and a summary.json's words read back are written back as they were."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pipeprof
from pipeprof.analysis.ranks import Straggler
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation, script_change
from pipeprof.render import advice_text, prediction_text, straggler_text
from pipeprof.render.advice_text import note_text, reason_text, recommendation_words
from pipeprof.render.interval_text import change_text
from pipeprof.render.prediction_text import model_text
from pipeprof.render.straggler_text import straggler_words
from pipeprof.run_meta import LoaderInfo

ANALYSIS = Path(pipeprof.__file__).parent / "analysis"
# The analysis modules whose Reasons these render modules word (the verdict's and the causes' are render.verdict_text's
# and render.cause_text's).
WORDED_HERE = ("recommend", "change_model", "prediction", "sampled_advice", "transform_advice", "ranks")


def _kinds_built(module: str) -> set[str]:
    """The kinds ``module`` builds: the first argument of every ``Reason("kind", ...)``."""
    tree = ast.parse((ANALYSIS / f"{module}.py").read_text(encoding="utf-8"))
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Reason"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


@pytest.mark.parametrize("module", WORDED_HERE)
def test_every_kind_analysis_builds_has_a_sentence(module):
    worded = (set(advice_text._REASONS) | set(prediction_text._MODELS) | set(advice_text._CODES)
              | set(straggler_text._WORDS) | {"script_text"})
    kinds = _kinds_built(module)
    assert kinds, f"the scan found no Reason in analysis/{module}.py"
    assert kinds - worded == set()


def test_a_kind_names_one_sentence_across_the_recommendation_and_model_tables():
    # advice_text words reasons, notes and code changes, prediction_text models; a kind in two would be ambiguous
    tables = (set(advice_text._REASONS), set(prediction_text._MODELS), set(advice_text._CODES))
    for i, a in enumerate(tables):
        for b in tables[i + 1:]:
            assert a & b == {"written"}


def test_words_read_back_are_written_back_as_they_were():
    entry = {"change": {"loader.num_workers": 2}, "predicted_samples_per_s": 10.0, "predicted_speedup": 2.0,
             "reason": "why, in words", "model": "the arithmetic", "note": "a; b", "tier": "estimated",
             "script_text": "train_loader: DataLoader(dataset(...), num_workers=2)", "code_change": "some code"}
    rec = Recommendation.from_json(entry)
    assert rec.reason == Reason.written("why, in words") and rec.note == (Reason.written("a; b"),)
    assert {**rec.to_json(), **recommendation_words(rec)} == entry
    straggler = Straggler.from_json({"rank": 1, "node": None, "kind": "input", "evidence": {}, "sentence": "Rank 1."})
    assert straggler is not None and straggler_words(straggler) == "Rank 1."


def test_a_scripts_python_is_written_from_the_change_and_its_loader():
    loader = LoaderInfo(name="train_loader", settings=(("dataset", "Images"), ("num_workers", 0)))
    rec = Recommendation({"loader.num_workers": 2}, None, None, Reason("images_only"), Reason("all_candidates"),
                         script_text=script_change({"loader.num_workers": 2}, loader))
    assert rec.script_text is not None and rec.script_text.kind == "script_text"
    assert "script_text" not in rec.to_json()
    assert recommendation_words(rec)["script_text"] == "train_loader: DataLoader(Images(...), num_workers=2)"
    assert change_text(rec) == "train_loader: DataLoader(Images(...), num_workers=2)"


def test_a_recommendation_with_no_note_writes_none():
    rec = Recommendation({}, None, None, Reason("images_only"), Reason("all_candidates"))
    assert note_text(rec.note) is None and "note" not in recommendation_words(rec)


def test_nested_reasons_are_worded_inside_out():
    why = Reason("predicted", {"why": Reason("pin_memory", {"h2d": 0.25}), "x": 1500.0, "tier": "estimated",
                               "current": 1000.0})
    assert reason_text(why) == ("host → device copies take 25% of step time; pinned memory can make them faster "
                                "and lets them overlap compute: predicted 1,500 samples/s (estimated; 1,000 "
                                "samples/s now)")
    model = Reason("not_predicted", {"why": Reason("fewer_workers", {"k": 4})})
    assert model_text(model) == ("not predicted: nothing this run measured carries this change; try --verify or tune "
                                 "(fewer workers than the run's 4: their effect was not measured)")
