"""How wrong are pipeprof's predictions? Predicted against measured samples/s over a grid, in one invocation.

    python benchmarks/predict.py [SCENARIO ...] [--workers 0,1,2] [--recs 1] [--steps 150] [--out DIR]

For each scenario and each ``loader.num_workers`` in the grid (the *base*
setting), the base is run in a fresh process (``pipeprof run``, as
``--verify`` does); then each of its first ``--recs`` recommendations that
change a setting is applied and run in a fresh process too. The prediction's
relative error is ``predicted / measured - 1`` (positive: the model promised
more than the re-run delivered). The base is also run a second time, last,
so the run-to-run noise of this machine at this moment is printed beside
the errors: an error inside the noise is as good as one re-run can tell.

Prints one row per prediction, then the median and the worst absolute
relative error, and the median noise; writes all rows to
``DIR/predict-<UTC>.json`` (default ``reports/bench``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.analysis.advice_text import set_text  # noqa: E402
from pipeprof.errors import UsageError  # noqa: E402
from pipeprof.pipeline.fresh_process import ChildRun, run_child  # noqa: E402
from pipeprof.scenario import Scenario, load_scenario  # noqa: E402
from pipeprof.variants import to_toml, vary  # noqa: E402

DEFAULT_SCENARIOS = ("scenarios/quick.toml", "scenarios/jpeg-decode.toml", "scenarios/memmap-cold-0workers.toml",
                     "scenarios/augment-heavy.toml")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=list(DEFAULT_SCENARIOS))
    parser.add_argument("--workers", default="0,1,2", help="base num_workers grid (default 0,1,2)")
    parser.add_argument("--recs", type=int, default=1, help="recommendations checked per base (default 1)")
    parser.add_argument("--steps", type=int, default=150, help="steps per run, at most (default 150)")
    parser.add_argument("--cache", type=Path, default=None, help="data cache folder")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"))
    args = parser.parse_args(argv)
    grid = [int(k) for k in args.workers.split(",")]
    rows, noise = [], []
    with tempfile.TemporaryDirectory(prefix="pipeprof-predict-") as tmp:
        work = Path(tmp)
        for path in args.scenarios:
            scenario = load_scenario(path)
            steps = min(scenario.total_steps(), args.steps)
            for k in grid:
                try:
                    base = vary(scenario, {"loader.num_workers": k, "train.steps": steps}, f"{path} (num_workers={k})")
                except UsageError as e:
                    print(f"{scenario.name} k={k}: skipped: {e}")
                    continue
                first = _run(base.scenario, base.raw, work, args.cache)
                if first.status != "complete":
                    print(f"{scenario.name} k={k}: base run {first.status}: {first.error}")
                    continue
                rate = first.summary["samples_per_s"]
                verdict = (first.summary.get("verdict") or {}).get("class")
                recs = [r for r in first.summary.get("recommendations") or [] if r.get("change")][: args.recs]
                if not recs:
                    print(f"{scenario.name} k={k}: {rate:,.0f} samples/s, {verdict}: no setting to change "
                          f"({(first.summary['recommendations'] or [{}])[0].get('reason', '')[:80]})")
                for rec in recs:
                    rows.append(_check(scenario.name, k, rate, verdict, rec, base.scenario, work, args.cache))
                again = _run(base.scenario, base.raw, work, args.cache)
                if again.status == "complete":
                    noise.append(again.summary["samples_per_s"] / rate - 1)
                    print(f"    noise: the base again: {again.summary['samples_per_s']:,.0f} samples/s "
                          f"({100 * noise[-1]:+.0f}%)")
    return _report(rows, noise, args.out)


def _check(name: str, k: int, rate: float, verdict: str, rec: dict, base: Scenario, work: Path,
           cache: Path | None) -> dict:
    row = {"scenario": name, "num_workers": k, "base_samples_per_s": rate, "verdict": verdict,
           "change": rec["change"], "predicted_samples_per_s": rec["predicted_samples_per_s"]}
    try:
        variant = vary(base, rec["change"], f"{name} (num_workers={k}, {set_text(rec)})")
    except UsageError as e:
        print(f"{name} k={k}: {set_text(rec)}: cannot apply: {e}")
        return {**row, "status": "invalid", "error": str(e)}
    child = _run(variant.scenario, variant.raw, work, cache)
    measured = (child.summary or {}).get("samples_per_s") if child.status == "complete" else None
    error = rec["predicted_samples_per_s"] / measured - 1 if measured else None
    print(f"{name} k={k}: {rate:8,.0f} samples/s ({verdict}); {set_text(rec)}: predicted "
          f"{rec['predicted_samples_per_s']:8,.0f}, measured "
          + (f"{measured:8,.0f} -> error {100 * error:+.0f}%" if measured else f"{child.status}: {child.error}"))
    return {**row, "status": child.status, "measured_samples_per_s": measured, "relative_error": error}


def _run(scenario: Scenario, raw: dict, work: Path, cache: Path | None) -> ChildRun:
    folder = Path(tempfile.mkdtemp(dir=work))
    path = folder / f"{scenario.name}.toml"
    path.write_text(to_toml(raw), encoding="utf-8")
    return run_child(path, folder / "runs", cache=cache)


def _report(rows: list[dict], noise: list[float], out: Path) -> int:
    errors = [abs(r["relative_error"]) for r in rows if r.get("relative_error") is not None]
    print()
    if errors:
        worst = max(rows, key=lambda r: abs(r["relative_error"]) if r.get("relative_error") is not None else -1)
        print(f"predictions checked: {len(errors)}; |relative error| median {100 * statistics.median(errors):.0f}%, "
              f"worst {100 * max(errors):.0f}% ({worst['scenario']} k={worst['num_workers']}, "
              f"{worst['change']})")
        within = sum(e <= 0.15 for e in errors)
        print(f"within ±15%: {within} of {len(errors)}")
    else:
        print("no prediction could be checked")
    if noise:
        print(f"run-to-run noise (the same base twice): median {100 * statistics.median(map(abs, noise)):.0f}%, "
              f"worst {100 * max(map(abs, noise)):.0f}% over {len(noise)} pairs")
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"predict-{stamp}.json"
    path.write_text(json.dumps({"rows": rows, "noise": noise}, indent=1), encoding="utf-8")
    print(f"rows: {path}")
    return 0 if errors else 1


if __name__ == "__main__":
    sys.exit(main())
