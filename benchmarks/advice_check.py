"""Does the advice hold on the user's own script? Each fixture profiled as a user would, its top advice applied,
and the script timed bare, in one invocation.

    python benchmarks/advice_check.py [--repeats 3] [--only NAME ...] [--steps N] [--out DIR]

For each fixture script (``tests/fixtures``, each in its own style; each prints its own throughput after
its first 5 optimizer steps, measured by its own ``perf_counter``):

1. ``pipeprof profile -- python SCRIPT`` twice, as a user would run it (no flags; ``--steps N``: with
   ``--steps N``, so that the what-if segments measure the script's loop at other settings). The top advice of each
   is its first recommendation; the two must agree (**no flip**), unless the second says they are within
   each other's noise.
2. The first profile's top advice is applied the way a user applies it: as the script's own arguments
   (``loader.num_workers`` -> ``--num-workers``, ``train.threads`` -> ``--threads``); advice no argument of the
   script makes is counted as not applicable bare, and so is "keep your settings" (nothing to apply).
3. The script as written and the script with the advice applied run bare (no pipeprof at all), interleaved,
   ``--repeats`` times each; the measured speed-up is the ratio of their medians, on the script's own clock.

Per fixture: the advice, predicted speed-up (80 % interval), measured speed-up, the error
(predicted / measured - 1) and whether the measurement fell inside the interval; then the median and worst
|error|, the share inside, and the flips. Targets (issue 44): median |error| <= 15 %, worst <= 30 %, >= 80 %
inside the 80 % interval, no flip over two profiles. Prints the load average before it: a shared machine's
neighbours move every ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
THROUGHPUT = re.compile(r"throughput: ([0-9.]+) samples/s")
TARGETS = {"median": 0.15, "worst": 0.30, "inside": 0.80}
# Each fixture: its style, and its command line (the arguments the advice is applied to are added after). Each
# trains for a few seconds, in passes of half a second or more: a pass of a tenth of a second would make the
# workers' start-up each pass most of what any worker count costs, which a real training job's passes never do,
# and would leave no steps for the what-if segments after --steps.
CASES: dict[str, tuple[str, list[str]]] = {
    "prep-bound, 0 workers, default threads": (
        "ImageFolder of JPEGs, RandomResizedCrop and a CPU-heavy transform, made in the training process",
        ["imagefolder_train.py", "--data", "{tmp}/images", "--images-per-class", "100", "--epochs", "3",
         "--transform-ms", "1.0"]),
    "IterableDataset": (
        "a self-sharding IterableDataset with a per-sample augmentation",
        ["iterable_shards.py", "--per-shard", "256", "--epochs", "6"]),
    "collate-bound plain loop": (
        "a TensorDataset and a bare loop whose collate costs 1 ms a batch",
        ["plain_loop.py", "--epochs", "6", "--samples", "16384", "--collate-ms", "1"]),
    "already good (compute-bound)": (
        "a TensorDataset and a bare loop whose step costs 8 ms of compute: nothing to fix in the loader",
        ["plain_loop.py", "--epochs", "4", "--compute-ms", "8"]),
}
ARGUMENTS = {"loader.num_workers": "--num-workers", "train.threads": "--threads"}


def bare(argv: list[str]) -> float | None:
    """The script's own throughput, run bare (no pipeprof)."""
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=600, cwd=FIXTURES)
    found = THROUGHPUT.findall(done.stdout)
    return float(found[-1]) if done.returncode == 0 and found else None


def profiled_top(argv: list[str], out: Path, flags: list[str]) -> dict[str, Any] | None:
    """The top recommendation of ``pipeprof profile FLAGS -- python SCRIPT`` (None: the profile failed)."""
    done = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--out", str(out), *flags, "--",
                           "python", *argv], capture_output=True, text=True, timeout=900, cwd=FIXTURES)
    folders = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    if done.returncode != 0 or not folders:
        print(f"  profile failed ({done.returncode}): {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    summary = json.loads((folders[-1] / "summary.json").read_text())
    recs = summary.get("recommendations") or []
    return recs[0] if recs else {"change": {}, "tier": "not_predicted"}


def applied(argv: list[str], change: dict[str, Any]) -> list[str] | None:
    """``argv`` with ``change`` as the script's own arguments; None where one has no argument."""
    extra: list[str] = []
    for key, value in change.items():
        flag = ARGUMENTS.get(key)
        if flag is None:
            return None
        extra += [flag, str(value)]
    return [*argv, *extra]


def words(change: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items()) or "keep the settings"


def check(name: str, argv: list[str], repeats: int, work: Path, flags: list[str]) -> dict[str, Any]:
    first = profiled_top(argv, work / "profile-1", flags)
    second = profiled_top(argv, work / "profile-2", flags)
    row: dict[str, Any] = {"fixture": name, "advice": None, "second": None, "flip": None}
    if first is None or second is None:
        return {**row, "status": "profile failed"}
    change, again = dict(first.get("change") or {}), dict(second.get("change") or {})
    tied = "within the noise of" in str(second.get("note") or "")
    row.update(advice=words(change), second=words(again), flip=change != again and not tied,
               tier=first.get("tier"), predicted=first.get("predicted_speedup"),
               interval=(first.get("interval") or {}).get("speedup"))
    if not change:
        return {**row, "status": "nothing to apply"}
    changed = applied(argv, change)
    if changed is None:
        return {**row, "status": "not applicable bare (no argument of the script makes it)"}
    base_rates, changed_rates = [], []
    for _ in range(repeats):  # interleaved: a slow spell of the machine falls on both
        for rates, command in ((base_rates, argv), (changed_rates, changed)):
            rate = bare(command)
            if rate:
                rates.append(rate)
    if not base_rates or not changed_rates:
        return {**row, "status": "a bare run failed"}
    measured = statistics.median(changed_rates) / statistics.median(base_rates)
    predicted, interval = row["predicted"], row["interval"]
    row.update(status="checked", measured=measured, base=base_rates, changed=changed_rates,
               error=predicted / measured - 1 if predicted else None,
               inside=interval[0] <= measured <= interval[1] if interval else None)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="bare runs of each side, interleaved")
    parser.add_argument("--only", action="append", choices=list(CASES), help="only these fixtures (repeatable)")
    parser.add_argument("--steps", type=int, default=None, help="profile with --steps N (the what-if segments)")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench")
    args = parser.parse_args(argv)
    flags = ["--steps", str(args.steps)] if args.steps else []
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); profiled with "
          f"{' '.join(flags) or 'no flags'}")
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pipeprof-advice-") as tmp:
        for name in args.only or CASES:
            style, command = CASES[name]
            work = Path(tmp) / re.sub(r"\W+", "-", name)
            work.mkdir()
            cmd = [part.format(tmp=work) for part in command]
            bare(cmd)  # a first run makes what the script caches (the JPEGs): not timed
            row = check(name, cmd, args.repeats, work, flags)
            rows.append(row)
            shown = (f"x{row['measured']:.2f} measured, error {100 * row['error']:+.0f} %, "
                     f"{'inside' if row['inside'] else 'outside'}" if row.get("status") == "checked" else row["status"])
            interval = row.get("interval")
            print(f"{name} ({style}): advice {row['advice']} ({row.get('tier')}), predicted "
                  f"x{row['predicted'] or 0:.2f}" + (f" ({interval[0]:.2f}-{interval[1]:.2f})" if interval else "")
                  + f"; {shown}; second profile: {row['second']}{' (a flip)' if row['flip'] else ''}", flush=True)
    checked = [r for r in rows if r.get("status") == "checked" and r.get("error") is not None]
    errors = [abs(r["error"]) for r in checked]
    inside = [r["inside"] for r in checked if r["inside"] is not None]
    flips = sum(bool(r["flip"]) for r in rows)
    print(f"{len(checked)} of {len(rows)} advices checked bare in {time.monotonic() - started:.0f} s: median "
          f"|error| {100 * statistics.median(errors):.1f} % (target <= 15), worst {100 * max(errors):.1f} % "
          f"(<= 30), inside the 80 % interval {sum(inside)} of {len(inside)} (>= 80 %), flips {flips} (0)"
          if errors else f"no advice of {len(rows)} could be checked bare; flips {flips}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"advice-check-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(rows, indent=1))
    print(f"rows: {path}")
    met = bool(errors) and statistics.median(errors) <= TARGETS["median"] and max(errors) <= TARGETS["worst"] \
        and (not inside or sum(inside) / len(inside) >= TARGETS["inside"]) and flips == 0
    print(f"targets {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
