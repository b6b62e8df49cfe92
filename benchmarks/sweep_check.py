"""Do the predictions hold on this machine? Three sweeps of the library's scenarios, each checked against itself.

    python benchmarks/sweep_check.py [--repeats 2] [--max-seconds 12] [--out DIR] [--only NAME[,NAME...]]

Every sweep writes ``prediction_check`` to its sweep.json (``analysis.prediction_check``): each point's
recommendations whose change lands on another point of the grid, set beside that point's measured
samples/s. This runs three sweeps of the library's scenarios, one after the other, each ``--repeats`` times
(fresh sweeps, each point a fresh process, as ``pipeprof sweep`` always runs them):

* ``demo``: ``scenarios/demo-sweep.toml`` (JPEG decode per sample; ``num_workers`` 0, 1, 2 × storage
  images, ram, device), at torch's default threads;
* ``augment``: ``scenarios/augment-heavy.toml`` (a CPU-heavy augmentation per sample) over ``num_workers``
  0, 1, 2 × ``train.threads`` 1, 2;
* ``memmap_cold``: ``scenarios/memmap-cold-0workers.toml`` (read cold from a memory-mapped file) over
  ``num_workers`` 0, 1, 2 × storage memmap, ram, at torch's default threads.

Per sweep it prints every pair (from, change, to, predicted, measured, error, inside the 80 % interval,
tier, and the end that never settled, if one did), the check's summary over every pair and over the pairs
whose two points settled, and the probes' cost per point as a share of the point's wall time (the what-if
probes after each run, ``what_ifs.took_s``, over the point's process wall time). With ``--repeats 2`` or
more, the run-to-run noise beside them: each point's samples/s in one sweep against the same point in the
others (median and worst |ratio - 1|), which is how far a prediction could land from a re-measurement of
the very setting it predicts. Then the pooled summary against the targets (inside the interval >= 80 % of
pairs, median |error| <= 15 %, worst <= 40 %), over every pair and over the settled ones.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeprof.analysis.prediction_check import Disturbance, summarize  # noqa: E402 - after the repository is on the path
from pipeprof.render.sweep import disturbed_words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = {  # name -> (scenario, grid arguments)
    "demo": ("scenarios/demo-sweep.toml", []),
    "augment": ("scenarios/augment-heavy.toml", ["--grid", "loader.num_workers=0,1,2", "--grid", "train.threads=1,2"]),
    "memmap_cold": ("scenarios/memmap-cold-0workers.toml",
                    ["--grid", "loader.num_workers=0,1,2", "--grid", "data.storage=memmap,ram"]),
}
TARGETS = {"inside_share": 0.80, "median_abs_error": 0.15, "worst_abs_error": 0.40}


def sweep(name: str, out: Path, max_seconds: float) -> Path | None:
    """One fresh sweep; its folder (None: it wrote none)."""
    scenario, grid = SWEEPS[name]
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "sweep", scenario, *grid, "--max-seconds",
                           str(max_seconds), "--quiet", "--out", str(out)], cwd=ROOT, capture_output=True, text=True)
    folders = sorted(p.parent for p in out.glob("*/sweep.json"))
    if proc.returncode != 0 or not folders:
        print(f"  {name}: sweep exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return folders[-1]


def points(folder: Path) -> dict[str, dict[str, Any]]:
    """label -> {samples_per_s, wall_s, probes_s} of the sweep's complete points."""
    doc = json.loads((folder / "sweep.json").read_text())
    walls = {row["index"]: float(row["wall_s"]) for row in csv.DictReader((folder / "points.csv").open())
             if row.get("wall_s")}
    out = {}
    for p in doc["points"]:
        if p.get("status") != "complete":
            continue
        run = json.loads((folder / p["folder"] / "run.json").read_text())
        out[p["label"]] = {"samples_per_s": p["samples_per_s"], "wall_s": walls.get(str(p["index"])),
                           "probes_s": (run.get("what_ifs") or {}).get("took_s")}
    return out


def said(s: dict[str, Any]) -> str:
    if not s["pairs"]:
        return "no pairs"
    inside = "n/a" if s["inside_share"] is None else f"{100 * s['inside_share']:.0f}%"
    return (f"{s['pairs']} pairs: median |error| {100 * s['median_abs_error']:.1f}%, worst "
            f"{100 * s['worst_abs_error']:.1f}%, inside the interval {inside}")


def against_targets(s: dict[str, Any]) -> str:
    if not s["pairs"]:
        return "nothing to compare"
    met = []
    for key, target in TARGETS.items():
        value = s[key]
        ok = value is not None and (value >= target if key == "inside_share" else value <= target)
        met.append(f"{key} {'met' if ok else 'NOT met'}")
    return ", ".join(met)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="fresh sweeps of each scenario (default 2)")
    parser.add_argument("--max-seconds", type=float, default=12.0, help="each point's budget (default 12)")
    parser.add_argument("--out", type=Path, default=None, help="keep the sweeps here (default: a temporary folder)")
    parser.add_argument("--only", default=None, help=f"comma-separated: {', '.join(SWEEPS)}")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SWEEPS)
    with tempfile.TemporaryDirectory() as tmp:
        base = args.out or Path(tmp)
        pooled: list[dict[str, Any]] = []
        for name in names:
            print(f"== {name}: {SWEEPS[name][0]} {' '.join(SWEEPS[name][1])}")
            measured: list[dict[str, dict[str, Any]]] = []
            for i in range(args.repeats):
                folder = sweep(name, base / f"{name}-{i}", args.max_seconds)
                if folder is None:
                    continue
                check = json.loads((folder / "sweep.json").read_text()).get("prediction_check") or {}
                rows = check.get("rows") or []
                pooled += rows
                print(f"- sweep {i + 1}: {said(check['summary'])}; undisturbed pairs: "
                      f"{said(check['summary']['undisturbed'])}")
                for r in rows:
                    change = ", ".join(f"{k}={v}" for k, v in r["change"].items())
                    disturbed = "; ".join(disturbed_words(Disturbance.from_json(d)) for d in r.get("disturbed") or [])
                    inside = {True: "inside", False: "OUTSIDE", None: "no interval"}[r["inside"]]
                    print(f"    {r['from']} -> {change}: predicted {r['predicted']:,.0f}, measured "
                          f"{r['measured']:,.0f} ({100 * r['error']:+.1f}%, {inside}, {r.get('tier')})"
                          + (f" [{disturbed}]" if disturbed else ""))
                got = points(folder)
                measured.append(got)
                shares = [p["probes_s"] / p["wall_s"] for p in got.values() if p["probes_s"] and p["wall_s"]]
                if shares:
                    probes_s = statistics.median(p["probes_s"] for p in got.values() if p["probes_s"])
                    wall_s = statistics.median(p["wall_s"] for p in got.values() if p["wall_s"])
                    print(f"    probes' cost: median {100 * statistics.median(shares):.0f}% of a point's wall time "
                          f"(max {100 * max(shares):.0f}%; median {probes_s:.1f} s of {wall_s:.1f} s)")
            if len(measured) >= 2:
                ratios = [abs(other[label]["samples_per_s"] / first[label]["samples_per_s"] - 1)
                          for first in measured[:1] for other in measured[1:]
                          for label in first if label in other]
                if ratios:
                    print(f"- run-to-run noise (the same point in another sweep): median "
                          f"{100 * statistics.median(ratios):.1f}%, worst {100 * max(ratios):.1f}% over "
                          f"{len(ratios)} points")
        every, settled = summarize(pooled), summarize([r for r in pooled if not r.get("disturbed")])
        print(f"== all sweeps: {said(every)} ({against_targets(every)})")
        print(f"== undisturbed pairs only: {said(settled)} ({against_targets(settled)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
