"""Start-up: the CLI's parser, --help, list and every command's --help never import torch, pandas or matplotlib.

Each case runs in a fresh interpreter (this test process has long imported them all) and asserts on
``sys.modules`` after the command: what is asserted is which modules load, never how long it takes.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeprof.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "pandas", "matplotlib")

PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    import pipeprof.cli.main as cli
    argv, HEAVY = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    out = io.StringIO()
    status = None
    if argv is not None:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                status = cli.main(argv)
            except SystemExit as e:  # argparse's --help exits
                status = e.code
    print(json.dumps({"status": status, "output": out.getvalue(),
                      "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
""")


def loaded_after(argv: list[str] | None) -> dict:
    """Run ``pipeprof.cli.main.main(argv)`` (just the import when ``argv`` is None) in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, COLUMNS="250"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_importing_the_cli_loads_no_heavy_module():
    assert loaded_after(None)["heavy"] == []


def test_help_loads_no_heavy_module_and_names_every_command():
    result = loaded_after(["--help"])
    assert result["status"] == 0
    assert result["heavy"] == []
    for name in COMMANDS:
        assert name in result["output"]


def test_list_loads_no_heavy_module_and_lists_the_scenarios():
    result = loaded_after(["list", str(ROOT / "scenarios")])
    assert result["status"] == 0
    assert result["heavy"] == []
    assert "quick.toml" in result["output"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_help_loads_no_heavy_module(command):
    result = loaded_after([command, "--help"])
    assert result["status"] == 0
    assert result["heavy"] == []
    assert f"usage: pipeprof {command}" in result["output"]


def test_the_probe_sees_a_heavy_import():
    """The check above can fail: a command that needs torch loads it under the same probe."""
    result = loaded_after(["report", str(ROOT / "tests" / "fixtures" / "runs" / "no-such-run")])
    assert result["status"] == 2  # a missing run folder: bad input, after the command's modules loaded
    assert "pandas" in result["heavy"]


def test_profiling_a_script_loads_torch_only_once_the_script_started():
    """``pipeprof profile`` starts the script before this process imports torch (Session.start does, while
    the script starts up); the names of the variables the script's side reads come from script/protocol.py."""
    proc = subprocess.run([sys.executable, "-c", "import sys, pipeprof.pipeline.script_run; "
                           "print('torch' in sys.modules)"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
