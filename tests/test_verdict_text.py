"""The verdict's words (render.verdict_text, render.cause_text): each reason, a kind plus its numbers, in the
sentence the terminal, the report and summary.json share. The decisions are tests/test_verdict.py's."""

import pytest

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.verdict import Verdict
from pipeprof.render.cause_text import cause_words
from pipeprof.render.verdict_text import bottleneck_words, note_words, verdict_json, verdict_sentence


def _verdict(reason, notes=()):
    return Verdict("input:prep", "R4", "input-bound", reason, {"data_wait_fraction": 0.3}, tuple(notes))


def test_a_reason_read_back_is_said_as_it_was_written():
    v = _verdict(Reason.written("Input-bound, as written."), [Reason.written("A note, as written.")])
    assert verdict_json(v) == {**v.to_json(), "sentence": "Input-bound, as written.", "notes": ["A note, as written."]}
    assert bottleneck_words(Reason.written("kept")) == "kept"


def test_the_input_sentence_names_the_cause_and_its_part():
    storage = Reason("storage", {"name": "files", "throttled": True, "preset": "nfs", "latency_s": None,
                                 "bandwidth_bytes_per_s": None})
    part = Reason("part", {"part": "fetch", "time_s": 0.002, "off_cpu_split": False, "core_wait_told_apart": True},
                  (storage,))
    cause = Reason("serial", {"fraction": 0.8}, (part, Reason("core_wait", {"fraction": 0.0, "worth_saying": False})))
    reason = Reason("input", {"degree": "input-bound", "data_wait_fraction": 0.3, "class": "input:fetch",
                              "candidates": ("input:fetch",)}, (cause, Reason("disk_idle")))
    assert verdict_sentence(_verdict(reason)) == (
        "Input-bound (30% of step time waiting for data), by storage (reading samples): the training process makes "
        "every batch (num_workers = 0) and 80% of that time is fetching samples (2.00 ms per sample, storage: files, "
        "throttled to emulate nfs storage); the disk read next to nothing (the bytes came from memory or the page "
        "cache).")


def test_an_uncertain_verdict_says_the_near_cut_off_then_the_other_reading():
    other = Reason("compute", {"data_wait_fraction": 0.04, "compute_fraction": 0.9})
    near = Reason("h2d_near", {"h2d_fraction": 0.19, "cut_fraction": 0.2, "data_wait_fraction": 0.04}, (other,))
    assert verdict_sentence(_verdict(near)) == (
        "Uncertain: the copy to the device takes 19% of step time, close to the 20% from which it is the bound "
        "(data wait 4.0%); if it is not, compute-bound: only 4.0% of step time waits for data; forward, backward "
        "and the optimizer step take 90%.")


def test_clauses_added_to_a_sentence_go_before_its_full_stop():
    base = Reason.written("Input-bound.")
    costliest = Reason("costliest_prep", {"name": "Resize", "per_sample_s": 1e-3, "cpu_per_sample_s": 5e-4,
                                          "share_of_prep": 0.6, "cpu_said": True}, (base,))
    assert verdict_sentence(_verdict(costliest)) == (
        "Input-bound; Resize takes 60% of preparation, 1.00 ms per sample (500 µs of it on the CPU).")
    varied = Reason("run_varied", {}, (costliest,))
    assert verdict_sentence(_verdict(varied)).endswith(
        "CPU); uncertain: the run itself varied between its windows (a note names them).")


@pytest.mark.parametrize("reason, words", [
    (Reason("bottleneck_unknown", {"counted_steps": 1, "min_counted_steps": 5}),
     "too few counted steps to judge: 1 step counted, at least 5 needed"),
    (Reason("bottleneck_compute", {"data_wait_fraction": 0.02, "cut_fraction": 0.05}),
     "compute-bound: only 2.0% of step time was spent waiting for data (under 5%)"),
    (Reason("bottleneck_h2d", {"h2d_fraction": 0.3, "cut_fraction": 0.2, "data_wait_fraction": 0.1}),
     "bound by the copy to the device: 30% of step time moved batches host → device (from 20%, and no less than "
     "the 10% waiting for data)"),
    (Reason("bottleneck_input", {"data_wait_fraction": 0.4, "cut_fraction": 0.2, "no_single_cause": True}),
     "input-bound: 40% of step time was spent waiting for data (input-bound from 20%); no single cause"),
    (Reason("sampled", {}, (Reason("bottleneck_partly_input", {"data_wait_fraction": 0.1, "low_fraction": 0.05,
                                                               "high_fraction": 0.2, "no_single_cause": False}),)),
     "partly input-bound: 10% of step time was spent waiting for data (between 5% and 20%) (sampled)"),
])
def test_the_bottleneck_reason_in_words(reason, words):
    assert bottleneck_words(reason) == words


def test_notes_in_words():
    assert note_words(Reason("oversubscribed", {"num_workers": 2, "torch_threads": 2, "cores_usable": 2,
                                                "busy_cores": 1.96})) == (
        "2 workers + 2 torch threads on 2 usable cores: more threads than cores, so they compete for CPU whenever "
        "all are busy; the training process and workers kept 2.0 of them busy on average.")
    assert note_words(Reason("cache_not_cold_note")) == (
        "The cold page cache was not cold, so the cost of reading from disk is understated.")


def test_a_script_getitem_off_the_cpu_is_said_as_such():
    part = Reason("part", {"part": "fetch", "time_s": None, "off_cpu_split": True, "core_wait_told_apart": False})
    assert cause_words(part) == ("time in __getitem__ off the CPU — reading storage, the network, sleeping or "
                                 "waiting for a core (not told apart in this run) (an unknown time per sample)")


def _kinds_recorded() -> set[str]:
    """Every reason kind analysis/ writes as a literal: ``Reason("kind", ...)`` (either branch of a conditional)
    and the kinds handed to differential's ``out_of_order``."""
    import ast
    from pathlib import Path

    import pipeprof.analysis

    kinds: set[str] = set()
    for path in Path(pipeprof.analysis.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
                continue
            if node.func.id not in ("Reason", "out_of_order"):
                continue
            first = node.args[0]
            branches = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            kinds.update(b.value for b in branches if isinstance(b, ast.Constant) and isinstance(b.value, str))
    return kinds


def test_every_reason_analysis_records_has_words_in_render():
    import ast
    from pathlib import Path

    import pipeprof.render

    said: set[str] = set()
    for path in Path(pipeprof.render.__file__).parent.glob("*_text.py"):
        said.update(n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str))
    kinds = _kinds_recorded()
    assert len(kinds) > 60 and kinds - said == set()
