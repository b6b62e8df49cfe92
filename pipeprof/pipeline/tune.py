"""``pipeprof tune``'s pipeline: search the fastest DataLoader and placement settings, confirm the best.

The search itself is ``pipeprof.analysis.tune.search``, in its robust mode
by default (``Budget.finalists``): broad-round trials at half the window, a
gain confirmed at the full window, the fastest few re-measured in a final
round. Here are its trials (short steady-state measurements in this process,
a fresh workload each, torch threads set explicitly), the compute ceiling
(the first trial's probe: training steps on one batch on the device), the confirming run
of the best setting in a fresh process, and tune.json, points.csv and
tune.html (the sweep's document and files, ``pipeprof.pipeline.sweep``).
Nothing here prints: progress goes to the ``Progress`` given.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipeprof.analysis.prediction_check import prediction_check
from pipeprof.analysis.recommend import DEVICE_DATA_MAX_BYTES
from pipeprof.analysis.sweep import best_summary, near_best, point_record
from pipeprof.analysis.tune import FINALISTS, SEEDS, Evaluate, Search, Space, Trial, ceiling_words, search
from pipeprof.analysis.verification import base_disturbed, pooled_noise
from pipeprof.errors import UsageError
from pipeprof.format import setting
from pipeprof.loader_rules import without_worker_only
from pipeprof.measure.environment import usable_cores
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.pipeline.derive import summarize
from pipeprof.pipeline.fresh_process import ChildRun, run_child
from pipeprof.pipeline.progress import SILENT, Progress
from pipeprof.pipeline.sweep import Measure, create_folder, keep_checks, new_document, save_document
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.render.script_text import dataloader_kwargs
from pipeprof.render.sweep import render_sweep_html
from pipeprof.run_folder import write_text
from pipeprof.scenario import ON_DISK, SAMPLE_BYTES, Scenario
from pipeprof.variants import to_toml, vary

ROUNDS = 2  # each of the final round's FINALISTS is measured up to this many times: 4 of --max-evals (12) kept for it
CONFIRM_REPEATS = 3  # the best and the settings as run, alternately in fresh processes, this many of each
BROAD_SHARE = 0.5  # the broad round's window: this share of --window (the final round's) ...
BROAD_MIN_S = 1.0  # ... but not below a second (or --window, if shorter): a first step and workers' start fit
TRIAL_MAX_STEPS = 5000  # a trial runs until steady: its time budget ends it first
DIMENSIONS_SHOWN = ("loader.num_workers", "train.threads", "loader.prefetch_factor", "loader.persistent_workers",
                    "loader.pin_memory", "data.storage", "loader.batch_size")


@dataclass(frozen=True)
class Budget:
    """How much the tuner may measure: trials, seconds per trial, seconds of the confirming run.

    ``max_evals`` bounds every trial (the compute ceiling's aside). The broad
    round's trials run ``window_s * broad_share`` at most (not below
    ``BROAD_MIN_S``, or ``window_s`` if shorter); the confirmations of a gain
    and the final round (``finalists`` settings, up to ``rounds`` measurements
    each, ``finalists * rounds`` of ``max_evals`` kept for it, successive
    halving: ``analysis/tune.py``) run ``window_s``. ``finalists=0``: the plain
    search, every trial ``window_s``.
    """

    max_evals: int
    window_s: float
    confirm_s: float
    finalists: int = FINALISTS
    rounds: int = ROUNDS
    broad_share: float = BROAD_SHARE
    confirm_repeats: int = CONFIRM_REPEATS  # the best and the settings as run, alternately, this many of each


def tune(scenario: Scenario, *, scenario_file: Path, overrides: list[str], out: Path, budget: Budget,
         batch_sizes: tuple[int, ...] = (), keep_storage: bool = False, cache: Path | None = None,
         progress: Progress = SILENT) -> tuple[dict[str, Any], Path]:
    """Search, confirm and write the tune folder under ``out``; its document (tune.json) and folder."""
    if budget.max_evals < 1:
        raise UsageError(f"--max-evals {budget.max_evals}: expected an integer >= 1")
    device = resolve_device(scenario.train.device)
    space = make_space(scenario, device, batch_sizes, keep_storage=keep_storage)
    start = current_settings(scenario, space)
    folder = create_folder(out, f"tune-{scenario.name}")
    doc = new_document("tune", scenario, scenario_file=str(scenario_file), overrides=overrides,
                       axes=[(d, []) for d in DIMENSIONS_SHOWN if d in start],
                       measure=Measure(max_seconds=budget.window_s))
    save_document(doc, folder)  # status "running": what a tune killed with kill -9 leaves
    robust = budget.finalists > 0
    broad_s = max(budget.window_s * budget.broad_share, min(budget.window_s, BROAD_MIN_S)) if robust \
        else budget.window_s
    trials = Trials(scenario, broad_s, cache, progress, str(scenario_file), tuple(space.dimensions()))
    status = "complete"
    ceiling: float | None
    try:
        result = search(start, space, trials.evaluate, trials.seeds, max_evals=budget.max_evals,
                        confirm_gains=robust, finalists=budget.finalists, rounds=budget.rounds,
                        remeasure=trials.with_window(budget.window_s))
        ceiling = trials.ceiling(result)
    except KeyboardInterrupt:
        status, result, ceiling = "interrupted", trials.partial(), None
    doc["points"] = trials.records
    doc["final_round"] = {"finalists": [f.to_json() for f in result.finalists], "noise": result.noise,
                          "broad_window_s": broad_s, "window_s": budget.window_s} if result.finalists else None
    best = result.best
    if best is not None and status == "complete":
        confirm = confirm_best(scenario, best.settings, folder, scenario_file=scenario_file,
                               seconds=budget.confirm_s, cache=cache, progress=progress, base=start,
                               repeats=budget.confirm_repeats)
        doc["points"].append(confirm)
        if confirm["status"] == "interrupted":
            status = "interrupted"
    finish_tune(doc, folder, status, best, ceiling, start)
    return doc, folder


def make_space(scenario: Scenario, device: torch.device, batch_sizes: tuple[int, ...], *,
               keep_storage: bool = False) -> Space:
    """What the search may change on this machine: workers up to twice the cores, the placements the data
    fits (RAM when it is on disk; the device when small enough), batch sizes only when given."""
    cores = usable_cores()
    placements: list[str] = []
    if keep_storage:
        return Space(cores=cores, max_workers=max(2 * cores, scenario.loader.num_workers + 2),
                     cuda=device.type == "cuda", batch_sizes=batch_sizes)
    if scenario.data.storage in ON_DISK:
        placements.append("ram")
    if scenario.data.samples * SAMPLE_BYTES <= DEVICE_DATA_MAX_BYTES:
        placements.append("device")
    if placements:
        placements.insert(0, scenario.data.storage)
    return Space(cores=cores, max_workers=max(2 * cores, scenario.loader.num_workers + 2), cuda=device.type == "cuda",
                 placements=tuple(placements), batch_sizes=batch_sizes)


def current_settings(scenario: Scenario, space: Space) -> dict[str, Any]:
    """Every searched dimension's value in the scenario as given (threads 0 → torch's default now)."""
    loader = scenario.loader
    s: dict[str, Any] = {"loader.num_workers": loader.num_workers,
                         "train.threads": scenario.train.threads or min(torch.get_num_threads(), space.cores),
                         "loader.prefetch_factor": loader.prefetch_factor,
                         "loader.persistent_workers": loader.persistent_workers}
    if space.cuda:
        s["loader.pin_memory"] = loader.pin_memory
    if space.placements:
        s["data.storage"] = scenario.data.storage
    if space.batch_sizes:
        s["loader.batch_size"] = loader.batch_size
    return s


class Trials:
    """Measures settings in this process for the search, keeping a record per trial."""

    def __init__(self, scenario: Scenario, window_s: float, cache: Path | None, progress: Progress, where: str,
                 dimensions: tuple[str, ...]) -> None:
        self.scenario, self.window_s, self.cache, self.progress, self.where = (scenario, window_s, cache, progress,
                                                                                where)
        self.dimensions = dimensions
        self.records: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any] | None] = []
        self.compute_probe: float | None = None  # the first run's compute ceiling probe, samples/s

    def with_window(self, window_s: float) -> Evaluate:
        """``evaluate`` with trials of ``window_s`` at most (the final round's longer windows)."""
        return lambda settings, why: self.evaluate(settings, why, window_s=window_s)

    def evaluate(self, settings: dict[str, Any], why: str, *, window_s: float | None = None) -> tuple[float | None, str]:
        index = len(self.records)
        label = settings_label(settings)
        change = {**settings, "train.steady": True, "train.max_seconds": window_s or self.window_s,
                  "train.steady_window_s": 0.25, "train.steady_windows": 4,
                  "train.steps": max(TRIAL_MAX_STEPS, self.scenario.total_steps())}
        try:
            variant = vary(self.scenario, change, f"{self.where} (tune: {label})", name=self.scenario.name)
        except UsageError as e:
            self.records.append(point_record(index, label, settings, "skipped", reason=str(e).split("): ", 1)[-1]))
            self.summaries.append(None)
            return None, "skipped"
        self.progress.line(f"  trial {index}: {label} ({why}) …", end="")
        torch.set_num_threads(int(settings["train.threads"]))
        recorder = LoadingRecorder() if variant.scenario.profile.loading else None
        work = None
        try:
            work = build_workload(variant.scenario, self.cache, recorder=recorder)
            # the what-if probes (seconds after each run) feed the recommendations: only the first trial's seed
            run = profile_workload(work, recorder=recorder, what_ifs=index == 0)
        except (OSError, RuntimeError) as e:
            return self._failed(index, label, settings, f"{type(e).__name__}: {e}", why)
        finally:
            work = None  # noqa: F841 - the next trial starts from nothing: no data, model or workers left
            gc.collect()
        info = run.info
        if info.status == "interrupted":
            raise KeyboardInterrupt
        if info.status != "complete":
            return self._failed(index, label, settings, str(info.error), why)
        summary = summarize(run)
        rate = summary.get("samples_per_s")
        if rate is None:  # complete, yet no step counted after the warm-up within the window
            return self._failed(index, label, settings, "no samples/s: no step after the warm-up in the window", why)
        ceiling = info.compute_ceiling
        if self.compute_probe is None and ceiling is not None and ceiling.samples_per_s:
            self.compute_probe = ceiling.samples_per_s
        self.records.append(point_record(index, label, settings, "complete", summary=summary))
        self.records[-1].update(why=why, window_s=change["train.max_seconds"])
        self.summaries.append(summary)
        self.progress.line(f" {rate:,.0f} samples/s")
        return rate, "complete"

    def _failed(self, index: int, label: str, settings: dict[str, Any], error: str, why: str) -> tuple[None, str]:
        self.records.append(point_record(index, label, settings, "failed", reason=" ".join(error.split())))
        self.records[-1]["why"] = why
        self.summaries.append(None)
        self.progress.line(" failed")
        return None, "failed"

    def seeds(self) -> list[dict[str, Any]]:
        """The first trial's recommendations that change searched settings, best predicted first."""
        first = self.summaries[0] if self.summaries else None
        out = []
        for rec in (first or {}).get("recommendations") or []:
            change = {k: v for k, v in (rec.get("change") or {}).items() if k in self.dimensions}
            if change:
                out.append(change)
        return out[:SEEDS]

    def ceiling(self, result: Search) -> float | None:
        """The compute ceiling: the device-placement trial if the search made one, else one more trial."""
        for t in result.trials:
            if t.settings.get("data.storage") == "device" and t.samples_per_s is not None:
                return t.samples_per_s
        if self.compute_probe is not None:  # training steps on one batch on the device: no loading at all
            return self.compute_probe
        if self.scenario.data.samples * SAMPLE_BYTES > DEVICE_DATA_MAX_BYTES:
            return None
        base = result.trials[0].settings if result.trials else {}
        no_workers = {f"loader.{key}": value for key, value in without_worker_only({}).items()}
        rate, _ = self.evaluate({**base, "data.storage": "device", "loader.num_workers": 0, **no_workers},
                                "the compute ceiling")
        return rate

    def partial(self) -> Search:
        """The search so far, after Ctrl-C: the best completed trial."""
        done = [r for r in self.records if r["status"] == "complete"]
        best = max(done, key=lambda r: r["samples_per_s"]) if done else None
        return Search([], Trial(best["change"], samples_per_s=best["samples_per_s"]) if best else None)


def confirm_best(scenario: Scenario, settings: dict[str, Any], folder: Path, *, scenario_file: Path,
                 seconds: float, cache: Path | None = None, progress: Progress = SILENT,
                 base: dict[str, Any] | None = None, repeats: int = 1,
                 runner: Callable[..., ChildRun] = run_child) -> dict[str, Any]:
    """The best setting, run in fresh processes until steady (at most ``seconds`` each): with ``base`` (the
    settings as run) and ``repeats`` > 1, the two alternately (A B A B ..., ``repeats`` each), the best's median
    recorded with both sides' runs, and a disturbed base flagged (``analysis.verification``); a full run folder."""
    label = f"confirm: {settings_label(settings)}"
    steady = {"train.steady": True, "train.max_seconds": seconds,
              "train.steps": max(TRIAL_MAX_STEPS, scenario.total_steps())}
    variant = vary(scenario, {**settings, **steady}, f"{scenario_file} (tune: confirm)", name=f"{scenario.name}-tuned")
    path = folder / "scenarios" / "best.toml"
    path.parent.mkdir(exist_ok=True)
    write_text(path, to_toml(variant.raw))
    base_path = None
    if base is not None and repeats > 1:
        as_run = vary(scenario, {**base, **steady}, f"{scenario_file} (tune: as run)", name=f"{scenario.name}")
        base_path = folder / "scenarios" / "as-run.toml"
        write_text(base_path, to_toml(as_run.raw))
    rates, base_rates = [], []
    child: ChildRun | None = None
    for i in range(max(repeats, 1)):
        if base_path is not None:
            progress.line(f"  the settings as run in a fresh process ({i + 1} of {repeats}) …")
            as_run_child = runner(base_path, folder / "points" / "as-run", cache=cache)
            rate = (as_run_child.summary or {}).get("samples_per_s")
            if as_run_child.status == "complete" and isinstance(rate, (int, float)):
                base_rates.append(float(rate))
        progress.line(f"  confirming the best in a fresh process: {settings_label(settings)} …")
        child = runner(path, folder / "points", cache=cache)
        rate = (child.summary or {}).get("samples_per_s")
        if child.status != "complete" or not isinstance(rate, (int, float)):
            break
        rates.append(float(rate))
    assert child is not None
    rel = str(child.folder.relative_to(folder)) if child.folder else None
    record = point_record(-1, label, settings, child.status, reason=child.error, folder=rel,
                          summary=child.summary if child.status == "complete" else None)
    record["why"] = "the best trial, confirmed in a fresh process"
    if base_path is not None:
        record["why"] = "the best trial, confirmed in fresh processes alternately with the settings as run"
        if rates:
            record["samples_per_s"] = statistics.median(rates)
        record["interleaved"] = {"samples_per_s": rates, "base_samples_per_s": base_rates,
                                 "base_median_samples_per_s": statistics.median(base_rates) if base_rates else None,
                                 "base_disturbed": base_disturbed(base_rates),
                                 "rerun_noise": pooled_noise([rates, base_rates]).to_json()}
    return record


def finish_tune(doc: dict[str, Any], folder: Path, status: str, best: Trial | None,
                ceiling: float | None, start: dict[str, Any]) -> None:
    """tune.json's best (the confirmed run when it completed), the snippets, the ceiling; the files."""
    confirm = next((p for p in doc["points"] if p["index"] == -1 and p["status"] == "complete"), None)
    trial = None
    if best is not None:
        trial = next((p for p in doc["points"] if p["status"] == "complete" and p["change"] == best.settings
                      and p["index"] >= 0), None)
    chosen = confirm or trial
    doc["best"] = best_summary(chosen, start)
    doc["near_best"] = near_best([p for p in doc["points"] if p["index"] >= 0], trial)
    doc["prediction_check"] = prediction_check(doc["points"]).to_json()
    keep_checks(doc, "tune")
    if chosen is not None:
        doc["best"]["changed"] = {k: v for k, v in chosen["change"].items() if start.get(k) != v}
        doc["toml_snippet"] = toml_snippet(chosen["change"])
        doc["dataloader_kwargs"] = dataloader_kwargs(chosen["change"])
    if chosen is not None and chosen["change"].get("data.storage") == "device":
        ceiling = max(ceiling or 0.0, chosen["samples_per_s"])  # the best is the ceiling setting itself
    doc["ceiling"] = {"samples_per_s": ceiling,
                      "words": ceiling_words(chosen["samples_per_s"] if chosen else None, ceiling)}
    doc["status"] = status if chosen is not None or status == "interrupted" else "failed"
    doc["notes"].append("Trials are short steady-state measurements in one process (a fresh workload each); "
                        "the best is confirmed by a full run in a fresh process (index -1).")
    save_document(doc, folder)
    write_text(folder / "tune.html", render_sweep_html(doc, folder_name=folder.name))


def toml_snippet(settings: dict[str, Any]) -> str:
    """The settings as TOML tables (``[loader]`` ``num_workers = 4`` ...), unset (None) values left out."""
    tables: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, _, name = key.partition(".")
        if value is not None:
            tables.setdefault(section, {})[name] = value
    return to_toml(tables).strip()


def settings_label(settings: dict[str, Any]) -> str:
    """``workers=4 threads=2 ...``: a trial's settings in a few words."""
    names = {"loader.num_workers": "workers", "train.threads": "threads", "loader.prefetch_factor": "prefetch",
             "loader.persistent_workers": "persistent", "loader.pin_memory": "pin", "data.storage": "storage",
             "loader.batch_size": "batch"}
    return " ".join(f"{names.get(k, k)}={setting(v)}" for k, v in settings.items() if v is not None)
