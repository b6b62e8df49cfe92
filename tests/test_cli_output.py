"""What the commands print, read the ways users read it: piped, in an 80-column terminal, into a reader that
stops early (``| head``), and the spelling of their output options (issue 14, item 13)."""

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeprof.cli.list_cmd import Entry, listing
from pipeprof.cli.main import build_parser, main

ROOT = Path(__file__).parent.parent
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))
FIXTURE_RUN = ROOT / "tests" / "fixtures" / "runs" / "scenario-ram"
ENV = {**os.environ, "COLUMNS": "80", "LINES": "24"}


def _names():
    return [e["name"] for e in json.loads(_pipeprof("list", "--json").stdout)]


def _pipeprof(*args, stdout=subprocess.PIPE, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipeprof", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=cwd, env=ENV, timeout=120)


def _with_closed_stdout(*args, cwd=ROOT):
    """Run pipeprof with stdout a pipe whose reader has already gone (the end of ``| head`` that stopped)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return _pipeprof(*args, stdout=write, cwd=cwd)
    finally:
        os.close(write)


def test_list_piped_at_80_columns_prints_every_name_file_and_description_in_full():
    result = _pipeprof("list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "storage", "workers", "file", "description"]
    assert len(lines) == 1 + len(SCENARIOS)  # one line per scenario, nothing wrapped
    assert "…" not in result.stdout
    for line, path in zip(lines[1:], SCENARIOS, strict=True):
        text = path.read_text()
        name = text.split('name = "', 1)[1].split('"', 1)[0]
        description = text.split('description = "', 1)[1].split('"\n', 1)[0]
        assert line.startswith(name + " ") and f"scenarios/{path.name}" in line
        assert line.endswith(" ".join(description.replace('\\"', '"').split()))


def test_list_in_an_80_column_terminal_keeps_names_whole_and_fits_the_width():
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "pipeprof", "list"], stdout=terminal,
                                   stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    finally:
        os.close(controller)
    lines = b"".join(chunks).decode().replace("\r\n", "\n").splitlines()
    assert lines and all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in "\n".join(lines)
    for name in _names():
        assert any(line.startswith(name + " ") for line in lines), name
    assert "memmap-cold-0workers" in "\n".join(lines)


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_listing_at_any_width_keeps_names_and_files_whole_and_folds_descriptions(width):
    entries = [Entry("scenarios/memmap-cold-0workers.toml", "memmap-cold-0workers", "memmap", 0, "word " * 60),
               Entry("scenarios/b.toml", None, None, None, None, "b.toml: name must be a non-empty string")]
    lines = listing(entries, width)
    assert lines[0].startswith("name")
    assert lines[1].startswith("memmap-cold-0workers ") and lines[1].rstrip().split()[3] == entries[0].file
    assert all(len(line) <= max(width, len(lines[1].split("  word")[0])) for line in lines)
    assert sum(line.count("word") for line in lines) == 60  # folded, nothing cut
    assert any(line.startswith("invalid ") for line in lines) and any("non-empty string" in line for line in lines)
    plain = listing(entries, None)
    assert len(plain) == 3 and plain[1].endswith("word") and plain[2].endswith("a non-empty string")


def test_list_json_gives_name_file_description_and_the_settings_the_table_shows(tmp_path):
    (tmp_path / "a.toml").write_text((ROOT / "scenarios" / "quick.toml").read_text())
    (tmp_path / "b.toml").write_text("name = 1")
    result = _pipeprof("list", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    good, bad = json.loads(result.stdout)
    assert good == {"file": str(tmp_path / "a.toml"), "name": "quick", "storage": "ram", "num_workers": 0,
                    "description": good["description"], "error": None}
    assert good["description"] and "json" not in good["description"]
    assert bad["file"] == str(tmp_path / "b.toml") and bad["name"] is None and "name" in bad["error"]


@pytest.mark.parametrize("command", [["list"], ["list", "--json"], ["report", "{run}"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path, command):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    result = _with_closed_stdout(*(arg.format(run=run) for arg in command))
    assert result.returncode in (0, 1)
    assert result.stderr == ""


def test_head_reading_one_line_ends_list_quietly():
    read, write = os.pipe()
    head = subprocess.Popen(["head", "-1"], stdin=read, stdout=subprocess.PIPE, text=True)
    os.close(read)
    try:
        result = _pipeprof("list", stdout=write)
    finally:
        os.close(write)
    first = head.communicate(timeout=30)[0]
    assert first.split() == ["name", "storage", "workers", "file", "description"]
    assert result.returncode in (0, 1) and result.stderr == ""


@pytest.mark.parametrize("command", [["report", "{run}"], ["list"]])
def test_in_process_a_closed_stdout_is_exit_status_1_not_system_exit(tmp_path, monkeypatch, command):
    """rich answers a broken pipe with SystemExit(1), which would end a caller's process running main([...])
    and skip what a command still has to write to stderr."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        assert main([arg.format(run=run) for arg in command]) == 1
        monkeypatch.undo()


PRINTER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
for i, (x,) in enumerate(loader):
    print(f"batch {i}: {x.sum().item():.3f}")
"""


@pytest.mark.integration
def test_profile_into_a_closed_pipe_shows_the_scripts_traceback_from_the_script_and_the_closing_line(tmp_path):
    script = tmp_path / "printer.py"
    script.write_text(PRINTER)
    result = _with_closed_stdout("profile", "-o", str(tmp_path / "runs"), "--", "python", str(script), cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the script's own: an uncaught BrokenPipeError
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith(f'  File "{script}", line 6, in <module>'), result.stderr
    assert "boot.py" not in result.stderr and "runpy" not in result.stderr
    assert "BrokenPipeError: [Errno 32] Broken pipe" in result.stderr
    (folder,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert f"pipeprof: report: {folder / 'report.html'}" in lines
    assert lines[-1].startswith("pipeprof: failed: the script raised BrokenPipeError") and str(folder) in lines[-1]


@pytest.mark.parametrize("argv,dest,value", [
    (["export", "R", "--format", "chrome-trace", "-o", "t.json"], "output", "t.json"),
    (["export", "R", "--format", "chrome-trace", "--output", "t.json"], "output", "t.json"),
    (["run", "s.toml", "-o", "d"], "out", "d"),
    (["run", "s.toml", "--out", "d"], "out", "d"),
    (["diagnose", "s.toml", "-o", "d"], "out", "d"),
    (["sweep", "s.toml", "-o", "d"], "out", "d"),
    (["tune", "s.toml", "-o", "d"], "out", "d"),
    (["compare", "A", "B", "-o", "d"], "out", "d"),
    (["profile", "-o", "d", "--", "python", "t.py"], "out", "d"),
])
def test_output_options_have_one_short_form_and_keep_their_long_spellings(argv, dest, value):
    assert getattr(build_parser().parse_args(argv), dest) == Path(value)


def test_export_short_output_option_writes_the_file(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    assert main(["export", str(run), "--format", "chrome-trace", "-o", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert f"trace: {tmp_path / 't.json'}" in capsys.readouterr().out
