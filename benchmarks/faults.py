"""What the trust suites try: bad inputs, faults and damaged run folders, and how many pass.

Runs each group's test files with pytest (in one process per group, as
the suite runs them) and counts the cases by outcome from pytest's JUnit
report: a parametrised case counts once per parameter set; a hypothesis
test counts once (it tries many documents). Bad inputs: the CLI's
arguments, scenario files, ``--set`` / ``--loader`` values and the
fuzzed configuration, and settings refused up front against what the
machine can start (``test_cli``, ``test_cli_output``, ``test_scenario``,
``test_overrides``, ``test_fuzz_config``, ``test_validation_up_front``, and the regression gate's,
``test_gate``). Faults: signals to the process
group, a double Ctrl-C, SIGTERM, SIGKILL of pipeprof, of the script and of
a worker, read-only and full disks, ``os._exit``, failing loaders and
ranks, a long --light job's event file, an export onto a full disk, SIGTERM to
an attach (``test_fault_injection``, ``test_interrupts``, ``test_faults``,
``test_rank_exit``, ``test_light``, ``test_export_trackers``, ``test_attach_analysis``). Damaged run
folders: ``test_run_folder`` and any
``test_damaged*``. Skipped cases (no mount namespace, no GPU) are counted
as such.

    python benchmarks/faults.py [--group NAME]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {
    "bad inputs": ["test_cli.py", "test_cli_output.py", "test_scenario.py", "test_overrides.py",
                   "test_fuzz_config.py", "test_validation_up_front.py", "test_gate.py"],
    "faults": ["test_fault_injection.py", "test_interrupts.py", "test_faults.py", "test_rank_exit.py",
               "test_light.py", "test_export_trackers.py", "test_attach_analysis.py"],
    "damaged folders": ["test_run_folder.py", "test_damaged*.py"],
}


def files(patterns: list[str]) -> list[str]:
    return sorted({str(p.relative_to(ROOT)) for pattern in patterns for p in (ROOT / "tests").glob(pattern)})


def outcomes(report: Path) -> tuple[dict[str, int], list[str]]:
    """Cases by outcome (passed, failed, skipped) in a JUnit XML report, and the failed ones' names."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        counts[outcome] += 1
        if outcome == "failed":
            failed.append(f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}")
    return counts, failed


def run_group(name: str) -> str:
    tests = files(GROUPS[name])
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                        *tests], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
        took_s = time.perf_counter() - started
        counts, failed = outcomes(report) if report.is_file() else ({"passed": 0, "failed": 0, "skipped": 0}, [])
    total = sum(counts.values())
    return (f"{name}: {total} cases, {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped ({took_s:.0f} s; {', '.join(Path(t).name for t in tests)})"
            + "".join(f"\n  failed: {case}" for case in failed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", choices=list(GROUPS), action="append", help="only these groups (repeatable)")
    args = parser.parse_args(argv)
    for name in args.group or GROUPS:
        print(run_group(name), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
