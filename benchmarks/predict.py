"""How wrong are pipeprof's predictions? Predicted against measured samples/s, over many kinds of change, in one invocation.

    python benchmarks/predict.py [SCENARIO ...] [--workers 0,1] [--threads N] [--steps 150] [--scripts | --no-scripts]
                                 [--no-scenarios] [--out DIR] [--base-runs 3] [--repeats 3] [--keep DIR]
    python benchmarks/predict.py --again ROWS.json   (re-predict offline from a --keep invocation's base folders)

**Scenarios.** For each scenario and each ``loader.num_workers`` of the grid
(the *base*), the base runs in a fresh process (``pipeprof run``, as
``--verify`` does), three times; the predictions come from the run folder of
the median one (one run's disturbance, a neighbour's burst of work or a first
run's cold caches, is then not the base every prediction of it inherits: a
user's one run can be disturbed too, which the noise printed beside says how
often). From that run folder the model predicts every change of
these kinds that applies (``recommend.predict_change``: recommended or not,
with its interval, ``intervals.intervals``): one worker more, one fewer,
``train.threads`` the other way, ``loader.prefetch_factor = 4``,
``loader.persistent_workers = true``, decoded samples cached in RAM (on-disk
data), the data on the device. Each predicted change then runs in a fresh
process too, three times (their median is the measured value: one re-run on a
shared machine can land far off, as a neighbour's burst of work takes the cores).

**Threads.** ``--threads N`` runs every base (scenarios: ``train.threads``;
scripts: ``pipeprof profile --threads N``) and every change but the threads
one with ``N`` torch threads; by default torch's own (the cores). On 2 shared
cores a process with 2 intra-op threads lands anywhere within about ±25 %
(a parallel op waits for its slower thread, and a neighbour's work takes
either core), with 1 thread within about ±6 %: ``--threads 1`` reads the
model's error with less of the machine's noise in it.

**Scripts** (``tests/fixtures``, unless ``--no-scripts``): the base is
``pipeprof profile --steps N -- python SCRIPT`` (three runs, the median one; its what-if segments,
the script's own loop fed by variants of its loader after the N steps, are what its predictions read);
each change of the loader and thread kinds is run as ``pipeprof profile --no-what-ifs --loader
KEY=VALUE / --threads N`` (the script unedited), and once as ``pipeprof profile --verify``, whose
``verification`` record is read as the product reports it.

The prediction's relative error is ``predicted / measured - 1`` (positive:
the model promised more than the re-run delivered); ``inside`` says whether
the measured samples/s fell within the prediction's 80 % interval. A base's
other runs against its median one are the run-to-run noise of this machine at
this moment, printed beside the errors: an error inside the noise is as good
as one re-run can tell. Prints one row per prediction, then the median
and worst absolute error, the share within the interval, the kinds covered,
and the noise; writes all rows to ``DIR/predict-<UTC>.json`` (default
``reports/bench``). Targets (issue 17): median |error| <= 10 %, worst <= 25 %,
the interval containing the measured value in >= 80 % of cases, >= 16
predictions of >= 5 kinds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeprof.analysis.intervals import intervals  # noqa: E402
from pipeprof.analysis.recommend import predict_change  # noqa: E402
from pipeprof.analysis.summary import summary_record  # noqa: E402
from pipeprof.errors import UsageError  # noqa: E402
from pipeprof.pipeline.fresh_process import ChildRun, run_child  # noqa: E402
from pipeprof.pipeline.script_tune import override_args, train_loader  # noqa: E402
from pipeprof.run_folder import load_run  # noqa: E402
from pipeprof.scenario import ON_DISK, Scenario, load_scenario  # noqa: E402
from pipeprof.variants import to_toml, vary  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCENARIOS = ("scenarios/quick.toml", "scenarios/jpeg-decode.toml", "scenarios/memmap-cold-0workers.toml",
                     "scenarios/augment-heavy.toml")
FIXTURES = ROOT / "tests" / "fixtures"
SCRIPTS = {  # name -> fixture arguments: a loop whose collate is slow (workers help), a trainer class with workers
    "plain_loop collate 1 ms": ["plain_loop.py", "--epochs", "4", "--samples", "4096", "--collate-ms", "1"],
    "trainer_class 1 worker": ["trainer_class.py", "--epochs", "3", "--samples", "4096", "--num-workers", "1",
                               "--getitem-ms", "0.05", "--no-tqdm"],
}
REPEATS = 3  # each changed setting runs 3 times; its measured samples/s is their median (one re-run's outlier out)
BASE_RUNS = 3  # each base runs 3 times; the predictions come from its median run (one disturbed run is not the base)
TARGETS = {"median": 0.10, "worst": 0.25, "inside": 0.80, "predictions": 16, "kinds": 5}


def kind_of(change: dict[str, Any], base_workers: int | None) -> str:
    """The yardstick's name for a kind of change."""
    if "data.storage" in change:
        return "device" if change["data.storage"] == "device" else "decoded cache in RAM"
    if "loader.num_workers" in change:
        k = change["loader.num_workers"]
        return "more workers" if base_workers is None or k > base_workers else "fewer workers"
    if "train.threads" in change:
        return "threads"
    if "loader.prefetch_factor" in change:
        return "prefetch"
    if "loader.persistent_workers" in change:
        return "persistent workers"
    return "other"


def candidates(k: int, threads: int | None, on_disk: bool, epochs: int, scenario: bool) -> list[dict[str, Any]]:
    """The changes tried from a base with ``k`` workers and ``threads`` torch threads."""
    out: list[dict[str, Any]] = [{"loader.num_workers": k + 1}]
    if k >= 1:
        out.append({"loader.num_workers": k - 1})
        out.append({"loader.prefetch_factor": 4})
        if epochs > 1:
            out.append({"loader.persistent_workers": True})
    if threads is not None:
        out.append({"train.threads": 1 if threads > 1 else 2})
    if scenario:
        if on_disk:
            out.append({"data.storage": "ram"})
        out.append({"data.storage": "device", **({"loader.num_workers": 0} if k else {})})  # no loader there
    return out


def predictions(folder: Path, changes: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float, Any]]:
    """(change, predicted samples/s, interval) for each change the model predicts, from a run folder."""
    run = load_run(folder)
    record = summary_record(run)
    out = []
    for change in changes:
        rec = predict_change(run, record.attribution, record.verdict, change)
        if rec is None or rec.predicted_samples_per_s is None:
            continue
        (interval,) = intervals(run, [rec])
        out.append((change, float(rec.predicted_samples_per_s), interval))
    return out


def row(source: str, base: str, rate: float, change: dict[str, Any], kind: str, predicted: float, interval: Any,
        measured: float | None, status: str, rates: list[float], folder: Path) -> dict[str, Any]:
    error = predicted / measured - 1 if measured else None
    bounds = list(interval.samples_per_s) if interval is not None and interval.samples_per_s else None
    inside = bool(bounds[0] <= measured <= bounds[1]) if bounds and measured else None
    text = (f"{measured:8,.0f} ({', '.join(f'{r:,.0f}' for r in rates)}) -> error {100 * error:+4.0f}%"
            if measured and error is not None else status)
    shown = f" [{bounds[0]:,.0f}-{bounds[1]:,.0f}]{' in' if inside else ' OUT'}" if bounds and measured else ""
    print(f"  {base}: {rate:8,.0f}; {kind:20s} {change}: predicted {predicted:8,.0f}{shown}, measured {text}")
    return {"source": source, "base": base, "base_samples_per_s": rate, "change": change, "kind": kind,
            "predicted_samples_per_s": predicted, "interval": bounds, "measured_samples_per_s": measured,
            "relative_error": error, "inside": inside, "status": status, "measured_per_run": rates,
            "model": getattr(interval, "method", None), "base_folder": str(folder)}


# scenarios

def typical(runs: list[Any], rate_of: Any, name: str, noise: list[float]) -> Any:
    """The run of median samples/s among a base's runs (None if none completed); the others' distance from it
    goes into ``noise``, and all their rates are printed: the base the predictions come from, and how far one
    run of it lands from another on this machine now."""
    done = sorted((r for r in runs if r is not None and rate_of(r)), key=rate_of)
    if not done:
        return None
    chosen = done[(len(done) - 1) // 2]
    rate = rate_of(chosen)
    others = [rate_of(r) / rate - 1 for r in done if r is not chosen]
    noise.extend(others)
    print(f"{name}: base {rate:,.0f} samples/s, the median of {', '.join(f'{rate_of(r):,.0f}' for r in done)}"
          + (f" (the others {', '.join(f'{100 * e:+.0f}%' for e in others)})" if others else ""))
    return chosen


def scenario_rows(paths: list[str], grid: list[int], steps: int, work: Path, cache: Path | None,
                  noise: list[float], base_runs: int, repeats: int, threads: int | None) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        scenario = load_scenario(path)
        n = min(scenario.total_steps(), steps)
        for k in grid:
            try:
                base = vary(scenario, {"loader.num_workers": k, "train.steps": n,
                                       **({"train.threads": threads} if threads else {})},
                            f"{path} (num_workers={k})")
            except UsageError as e:
                print(f"{scenario.name} k={k}: skipped: {e}")
                continue
            name = f"{scenario.name} k={k}" + (f" t={threads}" if threads else "")
            runs = [_run(base.scenario, base.raw, work, cache) for _ in range(base_runs)]
            first = typical([r for r in runs if r.status == "complete" and r.folder is not None and r.summary],
                            lambda r: r.summary.get("samples_per_s"), name, noise)
            if first is None:
                print(f"{name}: base runs {', '.join(f'{r.status}: {r.error}' for r in runs)}")
                continue
            rate = first.summary["samples_per_s"]
            ran_threads = _threads(first.summary)
            on_disk = base.scenario.data.storage in ON_DISK
            epochs = -(-n // base.scenario.steps_per_epoch())  # passes over the data within the steps run
            tried = candidates(k, ran_threads, on_disk, epochs, scenario=True)
            for change, predicted, interval in predictions(first.folder, tried):
                try:
                    variant = vary(base.scenario, change, f"{name} {change}")
                except UsageError as e:
                    print(f"  {name}: {change}: cannot apply: {e}")
                    continue
                children = [_run(variant.scenario, variant.raw, work, cache) for _ in range(repeats)]
                rates = [float(c.summary["samples_per_s"]) for c in children
                         if c.status == "complete" and c.summary and c.summary.get("samples_per_s")]
                measured = statistics.median(rates) if rates else None
                rows.append(row("scenario", name, rate, change, kind_of(change, k), predicted, interval, measured,
                                children[-1].status, rates, first.folder))
    return rows


def _run(scenario: Scenario, raw: dict, work: Path, cache: Path | None) -> ChildRun:
    folder = Path(tempfile.mkdtemp(dir=work))
    path = folder / f"{scenario.name}.toml"
    path.write_text(to_toml(raw), encoding="utf-8")
    return run_child(path, folder / "runs", cache=cache)


# scripts

def script_rows(steps: int, work: Path, noise: list[float], base_runs: int, repeats: int,
                threads: int | None) -> list[dict[str, Any]]:
    rows = []
    pinned: dict[str, Any] = {"train.threads": threads} if threads else {}  # the base's, unless a change sets them
    for name, (script, *script_args) in SCRIPTS.items():
        command = [sys.executable, str(FIXTURES / script), *script_args]
        name += f" t={threads}" if threads else ""
        base_flags = override_args(pinned) if pinned else []
        base = typical([_profile(command, steps, work, base_flags) for _ in range(base_runs)],
                       lambda r: r[1].get("samples_per_s"), name, noise)
        if base is None:
            print(f"{name}: base runs failed")
            continue
        folder, summary = base
        rate = summary["samples_per_s"]
        train = train_loader(summary)
        k = train.get("num_workers") if train else None
        if not isinstance(k, int):
            print(f"{name}: no training loader in the summary")
            continue
        tried = candidates(k, _threads(summary), False, 2, scenario=False)
        for change, predicted, interval in predictions(folder, tried):
            children = [_profile(command, steps, work, ["--no-what-ifs", *override_args({**pinned, **change})])
                        for _ in range(repeats)]  # a change's run is measured, not predicted from
            rates = [c[1]["samples_per_s"] for c in children if c and c[1].get("samples_per_s")]
            measured = statistics.median(rates) if rates else None
            rows.append(row("script", name, rate, change, kind_of(change, k), predicted, interval, measured,
                            "complete" if rates else "failed", rates, folder))
        verified = _profile(command, steps, work, [*base_flags, "--verify"])
        record = (verified[1].get("verification") or {}) if verified else {}
        if record.get("status") == "complete":
            print(f"  {name} --verify: {record.get('set')}: predicted {record.get('predicted_samples_per_s'):,.0f}, "
                  f"measured {record.get('measured_samples_per_s'):,.0f}, within interval: "
                  f"{record.get('within_interval')}")
    return rows


def _threads(summary: dict[str, Any]) -> int | None:
    threads = ((summary.get("attribution") or {}).get("cpu") or {}).get("torch_threads")
    return threads if isinstance(threads, int) else None


def _profile(command: list[str], steps: int, work: Path, flags: list[str]) -> tuple[Path, dict[str, Any]] | None:
    out = Path(tempfile.mkdtemp(dir=work))
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--quiet", "--steps", str(steps),
                           "--out", str(out), *flags, "--", *command], capture_output=True, text=True, cwd=ROOT)
    folders = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    if proc.returncode != 0 or not folders:
        print(f"  pipeprof profile {' '.join(flags)} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        return None
    return folders[0], json.loads((folders[0] / "summary.json").read_text(encoding="utf-8"))


# the report

def report(rows: list[dict[str, Any]], noise: list[float], out: Path) -> int:
    checked = [r for r in rows if r.get("relative_error") is not None]
    errors = [abs(r["relative_error"]) for r in checked]
    print()
    if not errors:
        print("no prediction could be checked")
        return 1
    worst = max(checked, key=lambda r: abs(r["relative_error"]))
    median = statistics.median(errors)
    inside = [r["inside"] for r in checked if r["inside"] is not None]
    share = sum(inside) / len(inside) if inside else float("nan")
    kinds = sorted({r["kind"] for r in checked})
    print(f"predictions checked: {len(errors)} ({sum(r['source'] == 'script' for r in checked)} on scripts), "
          f"{len(kinds)} kinds: {', '.join(kinds)}")
    print(f"|relative error|: median {100 * median:.1f}%, worst {100 * max(errors):.0f}% "
          f"({worst['base']}, {worst['change']}); within ±10%: {sum(e <= 0.10 for e in errors)} of {len(errors)}")
    print(f"measured inside the 80% interval: {sum(inside)} of {len(inside)} ({100 * share:.0f}%)")
    for kind in kinds:
        of_kind = [abs(r["relative_error"]) for r in checked if r["kind"] == kind]
        print(f"  {kind:22s} {len(of_kind):3d}  median |error| {100 * statistics.median(of_kind):5.1f}%  "
              f"worst {100 * max(of_kind):5.0f}%")
    if noise:
        print(f"run-to-run noise (a base's other runs against its median one): median "
              f"{100 * statistics.median(map(abs, noise)):.1f}%, worst {100 * max(map(abs, noise)):.0f}% over "
              f"{len(noise)} runs")
    met = {"median": median <= TARGETS["median"], "worst": max(errors) <= TARGETS["worst"],
           "inside": share >= TARGETS["inside"], "predictions": len(errors) >= TARGETS["predictions"],
           "kinds": len(kinds) >= TARGETS["kinds"]}
    print("targets: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"predict-{stamp}.json"
    path.write_text(json.dumps({"rows": rows, "noise": noise, "targets_met": met}, indent=1), encoding="utf-8")
    print(f"rows: {path}")
    return 0


def again(path: Path, out: Path) -> int:
    """Re-predict every row of an earlier invocation (run with ``--keep``) from its kept base folder with the
    model as it is now, against the same measured values: how a change to the model moves the errors, with
    the machine's noise held fixed. One invocation's noise is in those measured values, so a model fitted to
    them alone is fitted to that noise too: check a change on a second invocation before believing it."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for old in data["rows"]:
        folder = Path(old.get("base_folder") or "")
        if not (folder / "run.json").is_file():
            print(f"  {old['base']}: {old['change']}: base folder {folder} not kept")
            continue
        got = predictions(folder, [old["change"]])
        if not got:
            print(f"  {old['base']}: {old['change']}: no longer predicted")
            continue
        (change, predicted, interval), = got
        rows.append(row(old["source"], old["base"], old["base_samples_per_s"], change, old["kind"], predicted,
                        interval, old["measured_samples_per_s"], old["status"], old["measured_per_run"], folder))
    return report(rows, data.get("noise") or [], out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=list(DEFAULT_SCENARIOS))
    parser.add_argument("--workers", default="0,1", help="base num_workers grid (default 0,1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of every base and change but the threads one (default: torch's own)")
    parser.add_argument("--steps", type=int, default=150, help="steps per run, at most (default 150)")
    parser.add_argument("--scenarios", dest="with_scenarios", action=argparse.BooleanOptionalAction, default=True,
                        help="the scenarios (default: yes; --no-scenarios: the fixture scripts only)")
    parser.add_argument("--scripts", action=argparse.BooleanOptionalAction, default=True,
                        help="also the fixture scripts, through --loader/--threads and --verify (default: yes)")
    parser.add_argument("--cache", type=Path, default=None, help="data cache folder")
    parser.add_argument("--base-runs", type=int, default=BASE_RUNS,
                        help=f"runs of each base; predicted from the median one (default {BASE_RUNS})")
    parser.add_argument("--repeats", type=int, default=REPEATS,
                        help=f"runs of each changed setting; measured as their median (default {REPEATS})")
    parser.add_argument("--out", type=Path, default=Path("reports/bench"))
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep every run folder under DIR (rows name their base's): to re-predict offline")
    parser.add_argument("--again", type=Path, default=None, metavar="ROWS",
                        help="re-predict a --keep invocation's rows (its predict-*.json) offline; runs nothing")
    args = parser.parse_args(argv)
    if args.again is not None:
        return again(args.again, args.out)
    grid = [int(k) for k in args.workers.split(",")]
    noise: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pipeprof-predict-") as tmp:
        work = Path(tmp)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            work = args.keep.resolve()
        rows = scenario_rows(args.scenarios, grid, args.steps, work, args.cache, noise, args.base_runs,
                             args.repeats, args.threads) if args.with_scenarios else []
        if args.scripts:
            rows += script_rows(args.steps, work, noise, args.base_runs, args.repeats, args.threads)
    return report(rows, noise, args.out)


if __name__ == "__main__":
    sys.exit(main())
