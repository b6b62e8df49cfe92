"""Attribution error on the ground-truth cases: how far the measured shares are from the injected truth.

    python benchmarks/attribution.py [--repeats N]

The eight cases of ``tests/test_ground_truth.py`` (a data set whose read
sleeps, whose decode burns a core, a collate and a training step of known
cost; with 0 or 2 workers) run through the real profiler ``--repeats``
times. For each run the truth is the arithmetic on the injected costs *as
they ran* (``Profiled.arithmetic``); reported per case, as the median over
repeats: the error of the data-wait share of step time and of the fetch
share of loading time (percentage points, measured minus true), and how
often the verdict class was the true one. The test asserts every error
within 5 points on one run; this measures how far inside that they are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_ground_truth import CASES, profile_case  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{len(CASES)} ground-truth cases, {args.repeats} repeats each")
    print(f"  {'case':16} {'wait truth':>10} {'wait err pp':>11} {'fetch err pp':>12} {'verdict':>8}  class")
    all_wait, all_fetch, right, total = [], [], 0, 0
    for case in CASES:
        wait_err, fetch_err, correct = [], [], 0
        for _ in range(args.repeats):
            p = profile_case(case)
            truth, klass, _ = p.arithmetic()
            wait_err.append(100 * (p.summary["fractions"]["data_wait"] - truth["data_wait"]))
            c = p.counted()
            true_fetch = case.batch * c["fetch_s"].mean() / c["loading_s"].mean()
            fetch_err.append(100 * (p.summary["loading"]["fractions"]["fetch"] - true_fetch))
            correct += p.summary["verdict"]["class"] == klass
        all_wait += [abs(e) for e in wait_err]
        all_fetch += [abs(e) for e in fetch_err]
        right, total = right + correct, total + args.repeats
        print(f"  {case.name:16} {truth['data_wait']:10.3f} {statistics.median(wait_err):+11.2f} "
              f"{statistics.median(fetch_err):+12.2f} {correct:>4}/{args.repeats}  {klass}")
    print(f"median |error|: data wait {statistics.median(all_wait):.2f} pp (worst {max(all_wait):.2f}), "
          f"fetch share {statistics.median(all_fetch):.2f} pp (worst {max(all_fetch):.2f}); "
          f"verdict class right {right}/{total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
