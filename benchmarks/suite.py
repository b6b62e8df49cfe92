"""The test suite's time, tier by tier, and its slowest tests.

    python benchmarks/suite.py [--workers auto|N] [--tiers unit,integration,browser] [--slowest 10]

**Tiers** (pytest markers, see pyproject and tests/conftest.py): *unit*, every test not marked
``integration`` (fakes, committed run folders, in-process calls); *integration*, the small real runs of the
whole program, but not the browser's; *browser*, tests/test_browser.py (Chromium opens the pages). Each
tier is one ``pytest -m EXPR`` process of its own, one after the other, so the three together are the
whole suite. ``--workers N`` runs the tiers as ``make test`` does: the unit tier's tests not marked
``serial`` with ``-n N --dist loadgroup`` (pytest-xdist), then its ``serial`` ones (timing-sensitive) alone,
and the same for the integration and browser tiers; ``--workers 0`` runs every tier in one process
(``-p no:xdist``). Per tier: the wall time of its pytest processes (collection and
the session's shared runs included), its tests passed / failed / skipped, and across tiers the ``--slowest``
tests by their own duration (setup, call and teardown: a test that made a shared run pays for it). The
machine is shared: compare tiers and configurations measured in one invocation, not across runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIERS = {
    "unit": "not integration",
    "integration": "integration and not browser",
    "browser": "browser",
}
PARALLEL = {"unit"}  # real runs of several processes each gain nothing beside each other on few cores


@dataclass
class Tier:
    name: str
    wall_s: float
    status: int
    counts: dict[str, int] = field(default_factory=dict)
    durations_s: dict[str, float] = field(default_factory=dict)  # test id -> setup + call + teardown


def read_junit(path: Path) -> tuple[dict[str, int], dict[str, float]]:
    """Counts (passed, failed, skipped) and each test's duration from pytest's JUnit XML."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    durations: dict[str, float] = {}
    if not path.is_file():
        return counts, durations
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".partition("@")[0]  # less xdist's group
        durations[name] = durations.get(name, 0.0) + float(case.get("time") or 0.0)
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, durations


def run_tier(name: str, workers: str, scratch: Path) -> Tier:
    passes = [(name, TIERS[name], ["-p", "no:xdist"])] if workers == "0" or name not in PARALLEL else [
        (f"{name}-parallel", f"({TIERS[name]}) and not serial", ["-n", workers, "--dist", "loadgroup"]),
        (f"{name}-serial", f"({TIERS[name]}) and serial", ["-p", "no:xdist"])]
    tier = Tier(name, 0.0, 0, {"passed": 0, "failed": 0, "skipped": 0})
    for label, expression, options in passes:
        junit = scratch / f"{label}.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", expression,
                   f"--junitxml={junit}", "-o", "junit_duration_report=total", *options]
        started = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        tier.wall_s += time.perf_counter() - started
        (scratch / f"{label}.log").write_text(proc.stdout + proc.stderr)
        counts, durations = read_junit(junit)
        tier.counts = {k: tier.counts[k] + counts[k] for k in counts}
        tier.durations_s.update(durations)
        tier.status = max(tier.status, proc.returncode if proc.returncode != 5 else 0)  # 5: no test selected
    return tier


def report(tiers: list[Tier], workers: str, slowest: int) -> str:
    mode = (f"the unit tier on pytest-xdist -n {workers}, then its serial tests alone; the others in one process"
            if workers != "0" else "one process (-p no:xdist)")
    lines = [f"{mode}:", "", "| tier | wall | passed | failed | skipped | exit |", "|---|---|---|---|---|---|"]
    for t in tiers:
        lines.append(f"| {t.name} | {t.wall_s / 60:.1f} min | {t.counts['passed']} | {t.counts['failed']} | "
                     f"{t.counts['skipped']} | {t.status} |")
    total_s = sum(t.wall_s for t in tiers)
    lines += [f"| all | {total_s / 60:.1f} min | {sum(t.counts['passed'] for t in tiers)} | "
              f"{sum(t.counts['failed'] for t in tiers)} | {sum(t.counts['skipped'] for t in tiers)} | |", ""]
    every = sorted(((s, name, t.name) for t in tiers for name, s in t.durations_s.items()), reverse=True)
    lines += [f"The {slowest} slowest tests (setup + call + teardown):", ""]
    lines += [f"- {s:6.1f} s  {name} ({tier})" for s, name, tier in every[:slowest]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="auto", help="pytest-xdist workers: auto (one per core, as make test), "
                                                          "N, or 0 (one process)")
    parser.add_argument("--tiers", default=",".join(TIERS), help=f"comma-separated: {', '.join(TIERS)}")
    parser.add_argument("--slowest", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None, help="keep each tier's log and JUnit XML here")
    args = parser.parse_args(argv)
    names = args.tiers.split(",")
    unknown = [n for n in names if n not in TIERS]
    if unknown:
        parser.error(f"unknown tier(s): {', '.join(unknown)}; known: {', '.join(TIERS)}")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = args.keep or Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        tiers = [run_tier(name, args.workers, scratch) for name in names]
    print(report(tiers, args.workers, args.slowest))
    return 0 if all(t.status == 0 for t in tiers) else 1


if __name__ == "__main__":
    sys.exit(main())
