"""pipeprof compare --fail-if-slower: the regression gate from hand-made ratios, hand-made runs and the command."""

import json

import pytest
from test_compare import compare_fakes, fake_run

from pipeprof.analysis.gate import gate_exit_status, gate_one, regression_gate
from pipeprof.cli.main import main
from pipeprof.render.gate import gate_json, gate_line
from pipeprof.run_folder import save_run


def ratio(r, low, high, reason=None):
    return {"ratio": r, "low": low, "high": high, "reason": reason}


@pytest.mark.parametrize(("measured", "outcome"), [
    (ratio(0.80, 0.75, 0.86), "slower"),  # 20% slower, the whole interval below 1
    (ratio(0.93, 0.90, 0.96), "slower-within-threshold"),  # beyond the noise, but only 7% slower
    (ratio(0.80, 0.60, 1.05), "within-noise"),  # 20% slower in the point estimate, yet the interval holds 1
    (ratio(1.20, 1.10, 1.30), "faster"),
    (ratio(0.50, None, None, "the baseline: only 7 counted steps"), "undecided"),
])
def test_the_gate_fails_only_a_slowdown_past_the_threshold_and_beyond_the_noise(measured, outcome):
    r = gate_one(measured, 10, label="new", baseline_label="base")
    assert r.outcome == outcome and r.failed == (outcome == "slower")
    assert r.threshold_ratio == pytest.approx(0.9)
    line = gate_line(r)
    assert line.startswith(f"gate: {'FAIL' if r.failed else 'UNDECIDED' if outcome == 'undecided' else 'PASS'} new")
    if outcome == "undecided":
        assert "only 7 counted steps" in line and r.reason
    else:
        assert f"{measured['low']:.3f}-{measured['high']:.3f}" in line  # the interval that decided it


def test_the_threshold_is_strict_and_zero_fails_any_slowdown_beyond_noise():
    assert gate_one(ratio(0.95, 0.93, 0.97), 5, label="b", baseline_label="a").outcome == "slower-within-threshold"
    assert gate_one(ratio(0.95, 0.93, 0.97), 0, label="b", baseline_label="a").outcome == "slower"
    with pytest.raises(ValueError):
        gate_one(ratio(0.9, 0.8, 0.95), 100, label="b", baseline_label="a")


def test_exit_status_fail_beats_undecided_beats_pass():
    slower = gate_one(ratio(0.5, 0.4, 0.6), 10, label="b", baseline_label="a")
    unknown = gate_one(ratio(0.5, None, None, "too short"), 10, label="c", baseline_label="a")
    noise = gate_one(ratio(0.99, 0.9, 1.1), 10, label="d", baseline_label="a")
    assert gate_exit_status([noise, unknown, slower]) == 1
    assert gate_exit_status([noise, unknown]) == 2
    assert gate_exit_status([noise]) == 0
    j = gate_json([noise, slower], gate_exit_status([noise, slower]))
    assert j["exit_status"] == 1 and not j["passed"]
    assert [(x["run"], x["outcome"], x["failed"]) for x in j["runs"]] == [("d", "within-noise", False),
                                                                         ("b", "slower", True)]
    json.dumps(j, allow_nan=False)


def test_the_gate_reads_the_comparisons_own_interval():
    c = compare_fakes(fake_run("q", 0.010), fake_run("q", 0.0125), fake_run("q", 0.0101))
    slower, same = regression_gate(c, 10)
    assert (slower.label, slower.baseline_label) == ("run1", "run0")
    assert slower.ratio == pytest.approx(c["comparisons"][0]["throughput_ratio"]["ratio"])
    assert slower.outcome == "slower" and slower.slowdown_pct == pytest.approx(20, abs=1.5)
    assert same.outcome in ("within-noise", "slower-within-threshold", "faster") and not same.failed
    assert regression_gate(c, 25)[0].outcome == "slower-within-threshold"  # 20% slower is within 25%


# ---- the command, on hand-made run folders ------------------------------------------------------------

@pytest.fixture
def folders(tmp_path):
    made = {}
    for name, step_s in (("base", 0.010), ("slower", 0.0125), ("same", 0.0101)):
        made[name] = save_run(fake_run("q", step_s), tmp_path / name)
    return made


def test_the_command_exits_1_on_a_real_slowdown_and_says_why(folders, tmp_path, capsys):
    status = main(["compare", str(folders["base"]), str(folders["slower"]), "--fail-if-slower", "10",
                   "--out", str(tmp_path / "r"), "--quiet"])
    out = capsys.readouterr().out
    assert status == 1
    (line,) = [x for x in out.splitlines() if x.startswith("gate:")]
    assert line.startswith("gate: FAIL slower vs base") and "more than --fail-if-slower 10%" in line


def test_the_command_exits_0_inside_the_threshold_and_without_a_gate(folders, tmp_path, capsys):
    a, b = str(folders["base"]), str(folders["slower"])
    assert main(["compare", a, b, "--fail-if-slower", "30", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert "gate: PASS slower vs base" in capsys.readouterr().out
    assert main(["compare", a, b, "--out", str(tmp_path / "r"), "--quiet"]) == 0  # no gate: the comparison only


def test_json_for_ci_logs(folders, tmp_path, capsys):
    status = main(["compare", str(folders["base"]), str(folders["same"]), str(folders["slower"]),
                   "--fail-if-slower", "10", "--json", "--out", str(tmp_path / "r")])
    (line,) = capsys.readouterr().out.strip().splitlines()
    result = json.loads(line)
    assert status == 1 == result["gate"]["exit_status"]
    assert [r["run"] for r in result["gate"]["runs"]] == ["same", "slower"]
    assert result["gate"]["runs"][1]["outcome"] == "slower"
    assert result["comparisons"][1]["throughput_ratio"]["ratio"] == result["gate"]["runs"][1]["throughput_ratio"]
    assert json.loads((tmp_path / "r" / result["compare"].split("/r/")[1]).read_text())["kind"] == "compare"


@pytest.mark.parametrize("pct", ["ten", "-1", "100", "nan"])
def test_a_bad_percentage_is_one_line_and_exit_2(folders, tmp_path, capsys, pct):
    assert main(["compare", str(folders["base"]), str(folders["same"]), f"--fail-if-slower={pct}",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--fail-if-slower" in err and ">= 0 and < 100" in err
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_runs_too_short_to_tell_noise_are_undecided_exit_2(tmp_path, capsys):
    a = save_run(fake_run("q", 0.010, n=12), tmp_path / "a")  # 7 counted steps: no throughput windows
    b = save_run(fake_run("q", 0.020, n=12), tmp_path / "b")
    assert main(["compare", str(a), str(b), "--fail-if-slower", "10", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("gate:")]
    assert line.startswith("gate: UNDECIDED b vs a") and "profile more steps" in line and "counted steps" in line


def _script_run(name: str, step_s: float, command: list[str]):
    run = fake_run(name, step_s)
    run.meta.update(kind="script", script={"command": command}, loaders=[])
    return run


def test_a_gate_between_two_different_scripts_says_so_and_one_script_with_other_arguments_does_not(tmp_path,
                                                                                                    capsys):
    base = save_run(_script_run("train", 0.010, ["python", "-u", "train.py", "--lr", "1"]), tmp_path / "base")
    other = save_run(_script_run("train", 0.0125, ["python", "eval.py"]), tmp_path / "other")
    tuned = save_run(_script_run("train", 0.0101, ["python", "train.py", "--num-workers", "4"]), tmp_path / "tuned")
    main(["compare", str(base), str(other), str(tuned), "--fail-if-slower", "10", "--out", str(tmp_path / "r"),
          "--quiet"])
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("gate:")]
    assert lines[0].endswith("; note: other runs eval.py and base runs train.py: two different workloads, "
                             "compared all the same")
    assert "note:" not in lines[1]  # the same script, other arguments: the A/B the gate is for
    main(["compare", str(base), str(other), "--fail-if-slower", "10", "--json", "--out", str(tmp_path / "r")])
    (gate,) = json.loads(capsys.readouterr().out)["gate"]["runs"]
    assert gate["different_workloads"] == {"baseline": "train.py", "run": "eval.py"}
