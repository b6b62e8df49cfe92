"""Tune a scenario: find its fastest DataLoader and placement settings on this machine, by measurement.

Searches loader.num_workers, train.threads, loader.prefetch_factor,
loader.persistent_workers, loader.pin_memory (on CUDA) and the placement
(decoded samples cached in RAM, or held on the device where they fit), and
loader.batch_size only with --batch-sizes. The search (pipeprof/analysis/
tune.py) starts from the scenario as given, tries next what its
recommendations predict to be best, then walks one setting at a time and
keeps a change only when it gains more than 3%. Each trial is a short
steady-state measurement (--window seconds at most) in this process, a
fresh workload each time (data, model and DataLoader workers rebuilt; torch
threads set explicitly). The best setting is then confirmed by a full run in
a fresh process (--confirm-seconds), whose run folder and report land in
points/, and compared with the compute ceiling (the data on the device, no
loading at all).

Prints the best settings as a TOML snippet and as DataLoader arguments.
Writes reports/<UTC>-tune-<scenario>/: tune.html, tune.json (`best`,
`points` = the trials in order, `ceiling`), points.csv.

Examples:
  pipeprof tune scenarios/jpeg-decode.toml
  pipeprof tune scenarios/quick.toml --max-evals 8 --window 3

Exit status: 0 when a best setting was found, 1 when no trial completed, 130
when interrupted (the trials so far are kept), 2 for bad input.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from pipeprof.analysis.recommend import DEVICE_DATA_MAX_BYTES, dataloader_kwargs
from pipeprof.analysis.summary import summarize
from pipeprof.analysis.sweep import best_summary, near_best, point_record
from pipeprof.analysis.tune import Search, Space, ceiling_words, search
from pipeprof.cli.arguments import add_scenario_arguments
from pipeprof.cli.sweep_cmd import create_folder, new_document, positive_float, report_end, save_document
from pipeprof.errors import UsageError
from pipeprof.measure.environment import usable_cores
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.pipeline.fresh_process import run_child
from pipeprof.pipeline.train import build_workload, profile_workload, resolve_device
from pipeprof.render.sweep import render_sweep_html, sweep_table
from pipeprof.run_folder import write_text
from pipeprof.scenario import ON_DISK, SAMPLE_BYTES, Scenario, load_scenario
from pipeprof.variants import short, to_toml, vary

DEFAULT_MAX_EVALS = 12
DEFAULT_WINDOW_S = 4.0
DEFAULT_CONFIRM_S = 10.0
SEEDS = 2
DIMENSIONS_SHOWN = ("loader.num_workers", "train.threads", "loader.prefetch_factor", "loader.persistent_workers",
                    "loader.pin_memory", "data.storage", "loader.batch_size")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_scenario_arguments(p, example="scenarios/jpeg-decode.toml", out_what="the tune folder goes")
    p.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS, metavar="N",
                   help=f"at most N trial measurements (default {DEFAULT_MAX_EVALS})")
    p.add_argument("--window", type=positive_float, default=DEFAULT_WINDOW_S, metavar="S",
                   help=f"seconds per trial at most, until steady (default {DEFAULT_WINDOW_S:g})")
    p.add_argument("--confirm-seconds", type=positive_float, default=DEFAULT_CONFIRM_S, metavar="S",
                   help=f"the confirming run of the best setting, in a fresh process (default {DEFAULT_CONFIRM_S:g})")
    p.add_argument("--keep-storage", action="store_true",
                   help="do not try other placements of the data (RAM, device): only loader and thread settings")
    p.add_argument("--batch-sizes", default=None, metavar="B1,B2,...",
                   help="also search loader.batch_size over these values (changes the optimization!)")
    p.add_argument("--quiet", action="store_true", help="no progress lines and no table")


def execute(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, args.overrides)
    if args.max_evals < 1:
        raise UsageError(f"--max-evals {args.max_evals}: expected an integer >= 1")
    device = resolve_device(scenario.train.device)
    space = make_space(scenario, device, _batch_sizes(args.batch_sizes), keep_storage=args.keep_storage)
    start = current_settings(scenario, space)
    folder = create_folder(args.out, f"tune-{scenario.name}")
    args.fixed_steps = False
    args.max_seconds = args.window
    doc = new_document("tune", scenario, args, [(d, []) for d in DIMENSIONS_SHOWN if d in start])
    console = Console(stderr=True)
    trials = Trials(scenario, args, console, str(args.scenario), tuple(space.dimensions()))
    status = "complete"
    try:
        result = search(start, space, trials.evaluate, trials.seeds, max_evals=args.max_evals)
        ceiling = trials.ceiling(result)
    except KeyboardInterrupt:
        status, result, ceiling = "interrupted", trials.partial(), None
    doc["points"] = trials.records
    best = result.best
    if best is not None and status == "complete":
        confirm = confirm_best(scenario, best["settings"], folder, args, console)
        doc["points"].append(confirm)
        if confirm["status"] == "interrupted":
            status = "interrupted"
    finish_tune(doc, folder, status, best, ceiling, start)
    if not args.quiet:
        Console().print(sweep_table(doc, folder))
        if doc.get("toml_snippet"):
            print(f"best settings (TOML):\n{doc['toml_snippet']}\nas DataLoader arguments:\n"
                  f"{doc['dataloader_kwargs']}\n{doc['ceiling']['words']}")
    return report_end(doc, folder, console)


def make_space(scenario: Scenario, device: torch.device, batch_sizes: tuple[int, ...], *,
               keep_storage: bool = False) -> Space:
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

    def __init__(self, scenario: Scenario, args: argparse.Namespace, console: Console, where: str,
                 dimensions: tuple[str, ...]) -> None:
        self.scenario, self.args, self.console, self.where = scenario, args, console, where
        self.dimensions = dimensions
        self.records: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any] | None] = []
        self.measured: dict[str, float] = {}

    def evaluate(self, settings: dict[str, Any], why: str) -> tuple[float | None, str]:
        index = len(self.records)
        label = _label(settings)
        change = {**settings, "train.steady": True, "train.max_seconds": self.args.window,
                  "train.steady_window_s": 0.25, "train.steady_windows": 4,
                  "train.steps": max(5000, self.scenario.total_steps())}
        try:
            variant = vary(self.scenario, change, f"{self.where} (tune: {label})", name=self.scenario.name)
        except UsageError as e:
            self.records.append(point_record(index, label, settings, "skipped", reason=str(e).split("): ", 1)[-1]))
            self.summaries.append(None)
            return None, "skipped"
        if not self.args.quiet:
            self.console.print(f"  trial {index}: {label} ({why}) …", end="", markup=False, highlight=False)
        torch.set_num_threads(int(settings["train.threads"]))
        recorder = LoadingRecorder() if variant.scenario.profile.loading else None
        try:
            work = build_workload(variant.scenario, self.args.cache, recorder=recorder)
            run = profile_workload(work, recorder=recorder)
        except (OSError, RuntimeError) as e:
            return self._failed(index, label, settings, f"{type(e).__name__}: {e}")
        finally:
            work = None  # noqa: F841 - the next trial starts from nothing: no data, model or workers left
            gc.collect()
        if run.meta.get("status") == "interrupted":
            raise KeyboardInterrupt
        if run.meta.get("status") != "complete":
            return self._failed(index, label, settings, str(run.meta.get("error")))
        summary = summarize(run)
        rate = summary.get("samples_per_s")
        self.records.append(point_record(index, label, settings, "complete", summary=summary))
        self.records[-1]["why"] = why
        self.summaries.append(summary)
        if not self.args.quiet:
            self.console.print(f" {rate:,.0f} samples/s", markup=False, highlight=False)
        return rate, "complete"

    def _failed(self, index: int, label: str, settings: dict[str, Any], error: str) -> tuple[None, str]:
        self.records.append(point_record(index, label, settings, "failed", reason=" ".join(error.split())))
        self.summaries.append(None)
        if not self.args.quiet:
            self.console.print(" failed", markup=False, highlight=False)
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
            if t["settings"].get("data.storage") == "device" and t["samples_per_s"] is not None:
                return t["samples_per_s"]
        if self.scenario.data.samples * SAMPLE_BYTES > DEVICE_DATA_MAX_BYTES:
            return None
        base = result.trials[0]["settings"] if result.trials else {}
        rate, _ = self.evaluate({**base, "data.storage": "device", "loader.num_workers": 0,
                                 "loader.prefetch_factor": None, "loader.persistent_workers": False},
                                "the compute ceiling")
        return rate

    def partial(self) -> Search:
        done = [r for r in self.records if r["status"] == "complete"]
        best = max(done, key=lambda r: r["samples_per_s"]) if done else None
        return Search([], {"settings": best["change"], "samples_per_s": best["samples_per_s"]} if best else None)


def confirm_best(scenario: Scenario, settings: dict[str, Any], folder: Path, args: argparse.Namespace,
                 console: Console) -> dict[str, Any]:
    """The best setting, run in a fresh process until steady (at most --confirm-seconds): a full run folder."""
    label = f"confirm: {_label(settings)}"
    change = {**settings, "train.steady": True, "train.max_seconds": args.confirm_seconds,
              "train.steps": max(5000, scenario.total_steps())}
    variant = vary(scenario, change, f"{args.scenario} (tune: confirm)", name=f"{scenario.name}-tuned")
    path = folder / "scenarios" / "best.toml"
    path.parent.mkdir(exist_ok=True)
    write_text(path, to_toml(variant.raw))
    if not args.quiet:
        console.print(f"  confirming the best in a fresh process: {_label(settings)} …", markup=False,
                      highlight=False)
    child = run_child(path, folder / "points", cache=args.cache)
    rel = str(child.folder.relative_to(folder)) if child.folder else None
    record = point_record(-1, label, settings, child.status, reason=child.error, folder=rel,
                          summary=child.summary if child.status == "complete" else None)
    record["why"] = "the best trial, confirmed in a fresh process"
    return record


def finish_tune(doc: dict[str, Any], folder: Path, status: str, best: dict[str, Any] | None,
                ceiling: float | None, start: dict[str, Any]) -> None:
    """tune.json's best (the confirmed run when it completed), the snippets, the ceiling; the files."""
    confirm = next((p for p in doc["points"] if p["index"] == -1 and p["status"] == "complete"), None)
    trial = None
    if best is not None:
        trial = next((p for p in doc["points"] if p["status"] == "complete" and p["change"] == best["settings"]
                      and p["index"] >= 0), None)
    chosen = confirm or trial
    doc["best"] = best_summary(chosen, start)
    doc["near_best"] = near_best([p for p in doc["points"] if p["index"] >= 0], trial)
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
    tables: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, _, name = key.partition(".")
        if value is not None:
            tables.setdefault(section, {})[name] = value
    return to_toml(tables).strip()


def _label(settings: dict[str, Any]) -> str:
    names = {"loader.num_workers": "workers", "train.threads": "threads", "loader.prefetch_factor": "prefetch",
             "loader.persistent_workers": "persistent", "loader.pin_memory": "pin", "data.storage": "storage",
             "loader.batch_size": "batch"}
    return " ".join(f"{names.get(k, k)}={short(v)}" for k, v in settings.items() if v is not None)



def _batch_sizes(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256") \
            from None
    if any(s < 1 for s in sizes):
        raise UsageError(f"--batch-sizes {text}: expected integers >= 1 separated by commas, e.g. 64,128,256")
    return sizes

