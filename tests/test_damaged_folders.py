"""Damaged run folders, generated from the committed golden folders: every file truncated, corrupted and deleted.

The contract (issue 33, items 6 and 10): a row that is cut off, unreadable or
impossible is named with its file, line and reason; what remains is analysed
only while it is still sound, and the run is marked damaged; a damaged folder
is never written over with a healthy-looking summary; a folder that cannot be
read at all is one line and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import schema_errors

from pipeprof.cli.main import main
from pipeprof.errors import UsageError
from pipeprof.pipeline.derive import summarize
from pipeprof.run_check import TEXT_COLUMNS
from pipeprof.run_folder import TABLES, Run, load_run, save_run

RUNS = Path(__file__).parent / "fixtures" / "runs"
FOLDERS = sorted(p.name for p in RUNS.iterdir() if (p / "run.json").exists())
DERIVED = {"summary.json", "report.html"}  # re-derived by report: their damage loses nothing
OPS = ("truncate", "corrupt", "delete")
CASES = [(folder, file.name, op) for folder in FOLDERS for file in sorted((RUNS / folder).iterdir()) for op in OPS]


def damaged_copy(tmp_path: Path, folder: str, file: str, op: str) -> Path:
    """A copy of golden ``folder`` with ``file`` truncated mid-row, one cell (or byte run) corrupted, or deleted."""
    copy = tmp_path / folder
    shutil.copytree(RUNS / folder, copy)
    path = copy / file
    data = path.read_bytes()
    if op == "delete":
        path.unlink()
    elif op == "truncate" and file.endswith(".csv"):  # as a crash or a full disk leaves it: the last row cut
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        path.write_bytes(data[: last + max(1, (len(data) - 1 - last) // 2)])
    elif op == "truncate":  # a JSON document or a binary dump: cut in its middle
        path.write_bytes(data[: len(data) // 2])
    elif file.endswith(".csv"):
        path.write_text(_bad_cell(data.decode()))
    else:  # a run of garbage bytes in the middle
        middle = len(data) // 2
        path.write_bytes(data[:middle] + b"\x00#!garbage" + data[middle + 10:])
    return copy


def _bad_cell(text: str) -> str:
    lines = text.splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    if len(lines) < 3:  # an empty table: a row of nonsense added
        return text + ",".join(["x?"] * len(header)) + "\n"
    row = len(lines) // 2
    cells = lines[row].rstrip("\n").split(",")
    column = "warmup" if "warmup" in header else next(c for c in header if c not in TEXT_COLUMNS)
    cells[header.index(column)] = "maybe"
    lines[row] = ",".join(cells) + "\n"
    return "".join(lines)


def _same_records(a: Run, b: Run) -> bool:
    return a.meta == b.meta and all(getattr(a, t).equals(getattr(b, t)) for t in TABLES) and \
        a.attachments == b.attachments


PRISTINE = {folder: load_run(RUNS / folder) for folder in FOLDERS}


@pytest.mark.parametrize(("folder", "file", "op"), CASES, ids=[f"{f}/{n}/{o}" for f, n, o in CASES])
def test_damage_is_named_refused_or_harmless(tmp_path, folder, file, op):
    copy = damaged_copy(tmp_path, folder, file, op)
    try:
        run = load_run(copy)
    except UsageError as e:
        message = str(e)
        assert "\n" not in message and str(copy) in message
        assert file in message or file == "run.json" or op == "delete"
        return
    if run.damage:
        assert any(d.file == file for d in run.damage), [d.text() for d in run.damage]
    else:  # nothing recorded was lost: a derived file, or an empty table of a run that recorded none
        assert file in DERIVED or _same_records(run, PRISTINE[folder]), f"{file} {op}: damage not seen"


def test_the_generated_cases_cover_every_file_three_ways():
    files = {(f, n) for f, n, _ in CASES}
    assert len(CASES) == 3 * len(files) and {"run.json", "steps.csv", "loading.csv"} <= {n for _, n in files}


# The summary of a damaged folder that could still be analysed (script-plain-loop: the cheapest to summarize).
SUMMARIZED = [(n, op) for f, n, op in CASES if f == "script-plain-loop" and n not in DERIVED]


@pytest.mark.parametrize(("file", "op"), SUMMARIZED, ids=[f"{n}/{o}" for n, o in SUMMARIZED])
def test_a_damaged_folder_summary_says_damaged(tmp_path, file, op):
    copy = damaged_copy(tmp_path, "script-plain-loop", file, op)
    try:
        run = load_run(copy)
    except UsageError:
        return  # refused: test_damage_is_named_refused_or_harmless holds it to one line
    summary = summarize(run)
    if run.damage:
        assert summary["status"] == "damaged"
        assert {d["file"] for d in summary["damage"]} == {d.file for d in run.damage}
    else:
        assert summary["status"] == "complete" and "damage" not in summary


# Through the command, one of each outcome (refused, analysed as damaged): each render costs seconds.
REPORTED = [("run.json", "truncate"), ("steps.csv", "delete"), ("loading.csv", "truncate")]


@pytest.mark.parametrize(("file", "op"), REPORTED, ids=[f"{n}/{o}" for n, o in REPORTED])
def test_report_on_a_damaged_folder_never_writes_a_healthy_summary_over_it(tmp_path, capsys, file, op):
    copy = damaged_copy(tmp_path, "script-plain-loop", file, op)
    before = (copy / "summary.json").read_bytes()
    assert main(["report", "--quiet", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and file.split(".")[0] in err
    after = (copy / "summary.json").read_bytes()
    assert after == before or json.loads(after)["status"] == "damaged"


def _steps(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "steps.csv")


def _edit_steps(folder: Path, row: int, **cells: str) -> None:
    lines = (folder / "steps.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    values = lines[row + 1].rstrip("\n").split(",")
    for column, value in cells.items():
        values[header.index(column)] = value
    lines[row + 1] = ",".join(values) + "\n"
    (folder / "steps.csv").write_text("".join(lines))


@pytest.fixture
def plain(tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(RUNS / "script-plain-loop", copy)
    return copy


def test_a_truncated_loading_csv_keeps_the_prep_cost_it_measured(plain):
    expected = json.loads((plain / "summary.json").read_text())
    text = (plain / "loading.csv").read_text()
    last = text.rstrip("\n").rfind("\n") + 1
    prep = last + len(",".join(text[last:].split(",")[:8])) + 1  # where the last row's prep_s begins
    (plain / "loading.csv").write_text(text[: prep + 4])  # cut mid-number: "0.00" for 0.000124575
    summary = summarize(run := load_run(plain))
    assert [d.line for d in run.damage] == [len(text.splitlines())]
    assert summary["status"] == "damaged"
    per_sample = summary["loading"]["prep_per_sample_s"]
    assert per_sample == pytest.approx(expected["loading"]["prep_per_sample_s"], rel=0.05)


@pytest.mark.parametrize(("cells", "reason"), [
    ({"warmup": "maybe"}, "warmup 'maybe' is not True or False"),
    ({"step_s": "-0.004"}, "step_s -0.004 is negative"),
    ({"data_wait_s": "nan"}, "data_wait_s nan is not a finite number"),
    ({"compute_s": "inf"}, "compute_s inf is not a finite number"),
    ({"samples": "6x4"}, "samples '6x4' is not a number"),
    ({"samples": "3.5"}, "samples 3.5 is not a whole number"),
    ({"t_start_s": "-100"}, "t_start_s -100 is before the run began"),
    ({"step_s": "1e300"}, "step_s 1e+300 s is longer than the time to the next step's start (0.000871462 s)"),
])
def test_an_impossible_cell_sets_its_row_aside_named(plain, cells, reason):
    counted = int((~_steps(plain)["warmup"]).sum())
    _edit_steps(plain, 20, **cells)
    run = load_run(plain)
    assert [d.text() for d in run.damage] == [f"steps.csv line 22: {reason}"]
    summary = summarize(run)
    assert summary["steps"] == counted - 1 and summary["status"] == "damaged"


def test_a_row_with_a_cell_too_many_is_set_aside_and_lines_keep_their_numbers(plain):
    lines = (plain / "steps.csv").read_text().splitlines(keepends=True)
    width = len(lines[0].split(","))
    lines[10] = lines[10].rstrip("\n") + ",7\n"
    lines[20:20] = ["\n"]  # a blank line before line 21: the lines after it keep their numbers
    lines[30] = lines[30].replace("False", "maybe", 1)
    (plain / "steps.csv").write_text("".join(lines))
    assert [d.text() for d in load_run(plain).damage] == [
        f"steps.csv line 11: {width + 1} cells where the header has {width}",
        "steps.csv line 31: warmup 'maybe' is not True or False"]


def test_a_duplicated_row_is_counted_once(plain):
    lines = (plain / "steps.csv").read_text().splitlines(keepends=True)
    (plain / "steps.csv").write_text("".join(lines[:31] + [lines[30]] + lines[31:]))
    run = load_run(plain)
    assert [d.text() for d in run.damage] == ["steps.csv line 32: a second row of step 29 (line 31 is the first)"]
    assert summarize(run)["steps"] == json.loads((plain / "summary.json").read_text())["steps"]


def test_a_steps_csv_with_no_sound_counted_step_is_refused_and_not_written_over(plain, capsys):
    steps = _steps(plain)
    for row in steps.index[~steps["warmup"]]:
        _edit_steps(plain, int(row), warmup="maybe")
    before = (plain / "summary.json").read_bytes()
    assert main(["report", "--quiet", str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no counted step is left" in err and "steps.csv line 7" in err
    assert (plain / "summary.json").read_bytes() == before


def test_report_writes_a_damaged_summary_and_exits_2_naming_the_rows(plain, capsys):
    _edit_steps(plain, 20, warmup="maybe")
    assert main(["report", "--quiet", str(plain)]) == 2
    err = capsys.readouterr().err
    assert f"{plain / 'steps.csv'} line 22: warmup 'maybe' is not True or False" in err
    summary = json.loads((plain / "summary.json").read_text())
    assert summary["status"] == "damaged" and summary["damage"][0]["line"] == 22
    assert "Damaged run folder" in (plain / "report.html").read_text()


def test_export_compare_and_merge_refuse_a_damaged_folder(plain, tmp_path, capsys):
    _edit_steps(plain, 20, step_s="-1")
    assert main(["export", str(plain), "--format", "chrome-trace"]) == 2
    assert not (plain / "trace.json").exists()
    assert main(["compare", str(RUNS / "script-plain-loop"), str(plain), "-o", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("steps.csv line 22: step_s -1 is negative" in line for line in err)
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())
    assert main(["merge", str(plain), str(RUNS / "script-plain-loop"), "-o", str(tmp_path / "m")]) == 2
    assert "a merge needs a sound one" in capsys.readouterr().err
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


@pytest.mark.parametrize(("edit", "message"), [
    ({"format_version": 999}, "format_version 999 is newer than this pipeprof reads (1 to 1)"),
    ({"format_version": "one"}, "format_version 'one' is not a format pipeprof writes"),
])
def test_run_json_format_is_checked_on_read(plain, edit, message, capsys):
    meta = json.loads((plain / "run.json").read_text())
    (plain / "run.json").write_text(json.dumps({**meta, **edit}))
    assert main(["report", "--quiet", str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_a_device_given_as_a_list_is_damage_not_a_template_error(plain, capsys):
    meta = json.loads((plain / "run.json").read_text())
    (plain / "run.json").write_text(json.dumps({**meta, "device": ["cuda:0", "cuda:1"]}))
    assert main(["report", "--quiet", str(plain)]) == 2
    assert "run.json: device ['cuda:0', 'cuda:1'] is not a string" in capsys.readouterr().err


def _job(tmp_path: Path, world_size: object = 2) -> Path:
    """A two-rank job folder made of two copies of a profiled script's records."""
    job = tmp_path / "job"
    shutil.copytree(RUNS / "script-plain-loop", job)
    meta = json.loads((job / "run.json").read_text())
    (job / "run.json").write_text(json.dumps({**meta, "job": {"id": "j", "world_size": world_size,
                                                                "ranks": [0, 1]}}))
    for rank in (0, 1):
        folder = job / "ranks" / f"rank-{rank}"
        shutil.copytree(RUNS / "script-plain-loop", folder)
        (folder / "run.json").write_text(json.dumps({**meta, "rank": {"rank": rank, "world_size": 2}}))
    return job


def test_a_job_with_a_rank_deleted_is_damaged_not_complete(tmp_path):
    job = _job(tmp_path)
    assert not load_run(job).damage
    shutil.rmtree(job / "ranks" / "rank-1")
    run = load_run(job)
    assert [d.text() for d in run.damage] == [
        "ranks/rank-1: missing (run.json's job lists it among the 2 ranks recorded here): the job's figures lack "
        "this rank"]
    assert summarize(run)["status"] == "damaged"


def test_a_rank_s_truncated_steps_csv_is_named_from_the_job(tmp_path):
    job = _job(tmp_path)
    steps = job / "ranks" / "rank-1" / "steps.csv"
    steps.write_text(steps.read_text()[:-7])
    assert [d.file for d in load_run(job).damage] == ["ranks/rank-1/steps.csv"]


def test_a_world_size_that_is_not_a_number_is_damage(tmp_path):
    run = load_run(_job(tmp_path, world_size="two"))
    assert [d.text() for d in run.damage] == ["run.json: job.world_size 'two' is not a whole number >= 1"]


def test_an_unreadable_table_and_a_file_given_as_a_folder_say_what_they_are(plain, monkeypatch):
    with pytest.raises(UsageError, match=r"run.json: not a run folder \(it is a file"):
        load_run(plain / "run.json")
    real = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.name == "steps.csv":
            raise PermissionError(13, "Permission denied")  # chmod 000 (this suite may run as root)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(UsageError, match=r"steps.csv: cannot read it \(Permission denied\)$"):
        load_run(plain)


def test_a_transforms_row_outside_every_step_is_sound_and_no_other_negative_step(tmp_path):
    # An evaluation loader's batches after the last training step are written with step -1: reading the folder
    # back (pipeprof report) set them aside as "step -1 is negative", marked the run damaged and lost the
    # evaluation loader's transforms.
    from pipeprof.run_check import read_table
    from pipeprof.run_folder import TRANSFORM_COLUMNS

    path = tmp_path / "transforms.csv"
    path.write_text("step,loader,worker,kind,name,calls,wall_s,cpu_s\n"
                    "3,0,-1,transform,Resize,8,0.001,0.001\n"
                    "-1,1,-1,transform,CenterCrop,8,0.002,0.002\n"
                    "-1,1,-1,batch,,8,0.004,0.004\n"
                    "-2,1,-1,batch,,8,0.004,0.004\n")
    table, damage = read_table(path, "transforms", TRANSFORM_COLUMNS)
    assert table is not None and table["step"].tolist() == [3, -1, -1]
    assert [d.text() for d in damage] == ["transforms.csv line 5: step -2 is negative"]


def _saved_again(plain: Path, tmp_path: Path) -> Path:
    """The golden folder saved by this version (run.json's ``rows``: each table's rows as written)."""
    return save_run(load_run(plain), tmp_path / "saved")


def _cut_rows(path: Path, keep: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: 1 + keep]))  # at a row's end: every row left is whole


def test_a_table_cut_at_a_rows_end_is_named_from_run_jsons_own_count(plain, tmp_path, capsys):
    saved = _saved_again(plain, tmp_path)
    rows = json.loads((saved / "run.json").read_text())["rows"]
    assert rows["loading"] == len(pd.read_csv(saved / "loading.csv")) == 64
    _cut_rows(saved / "loading.csv", 20)
    run = load_run(saved)
    assert [d.text() for d in run.damage] == ["loading.csv: 20 rows where run.json says 64 were written: the rest "
                                              "is missing (cut short)"]
    assert summarize(run)["status"] == "damaged"
    _cut_rows(saved / "loading.csv", 0)  # to its header: the verdict would lose its evidence without a word
    assert summarize(load_run(saved))["status"] == "damaged"
    _cut_rows(saved / "steps.csv", 0)  # no step left: refused, one line, exit 2
    assert main(["report", "--quiet", str(saved)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no counted step is left" in err and "0 rows where run.json says 64" in err


def test_a_batchs_one_call_part_longer_than_the_batch_is_set_aside(plain):
    lines = (plain / "loading.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[11].rstrip("\n").split(",")
    cells[header.index("t_end_s")] = repr(float(cells[header.index("t_start_s")]) + 0.0015)
    cells[header.index("fetch_max_s")] = "8.8"
    lines[11] = ",".join(cells) + "\n"
    (plain / "loading.csv").write_text("".join(lines))
    (damage,) = load_run(plain).damage
    assert damage.text() == "loading.csv line 12: fetch_max_s 8.8 s is longer than its batch (0.0015 s from " \
                            "t_start_s to t_end_s)"


@pytest.mark.parametrize(("key", "value", "kind"), [("loaders", "x", "a list"), ("script", 7, "an object"),
                                                    ("absences", [1], "an object")])
def test_a_run_json_key_of_the_wrong_type_is_damage_and_the_summary_keeps_its_schema(plain, key, value, kind,
                                                                                     capsys):
    meta = json.loads((plain / "run.json").read_text())
    (plain / "run.json").write_text(json.dumps({**meta, key: value}))
    run = load_run(plain)
    assert [d.text() for d in run.damage] == [f"run.json: {key} {value!r} is not {kind}"]
    summary = summarize(run)
    assert summary["status"] == "damaged" and schema_errors(summary) == []
    assert main(["report", "--quiet", str(plain)]) == 2  # the page is drawn from what remains, damage named
    assert f"run.json: {key}" in capsys.readouterr().err
