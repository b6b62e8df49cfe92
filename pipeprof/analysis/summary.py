"""The summary: headline statistics of one run, derived from its raw records.

Pure functions over the run's DataFrames; nothing here times, samples or
renders. ``summary_record(run)`` returns a ``Summary``: the stages' records
(``Attribution``, ``Verdict``, ``Recommendation``) with the statistics;
its ``to_json()`` the data of ``summary.json``, the contract documented
in docs/summary-json.md and in ``pipeprof/schemas/summary.schema.json``
(``SUMMARY_SCHEMA_VERSION`` is bumped on incompatible change) but its sentences
(``bottleneck_reason``, the verdicts' ``sentence`` and ``notes``, the page-cache check's ``reason``), which
``render/`` words from the records' reasons and ``pipeline.derive.summary_document`` writes in, at the edge
(``pipeline.derive.summarize(run)`` is the whole summary.json of a run).
``attribution`` comes from ``pipeprof.analysis.attribution``, ``verdict`` from
``pipeprof.analysis.verdict``, ``recommendations`` from ``pipeprof.analysis.recommend``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from pipeprof.analysis.attribution import Attribution, attribution
from pipeprof.analysis.cache import CacheCheck
from pipeprof.analysis.code_view import CodeView
from pipeprof.analysis.device_memory import DeviceMemory, device_memory
from pipeprof.analysis.evidence import OFF_CPU_SPLIT
from pipeprof.analysis.hotspots import code_profile
from pipeprof.analysis.intervals import Interval, intervals, none, ranked
from pipeprof.analysis.loading import LoadingSummary
from pipeprof.analysis.ranks import (
    JobSection,
    RankEntry,
    RankResult,
    Straggler,
    job_recommendations,
    median_index,
    rank_entry,
    straggler,
)
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import Recommendation, recommend
from pipeprof.analysis.sections import LightSection, SampledSection, Steady
from pipeprof.analysis.steps import StepTime, counted_steps, counted_window_s
from pipeprof.analysis.thresholds import (
    COMPUTE_BOUND_FRACTION,
    H2D_BOUND_FRACTION,
    INPUT_BOUND_FRACTION,
    MIN_COUNTED_STEPS,
)
from pipeprof.analysis.transforms import (
    DecodeRow,
    LoaderTransforms,
    TransformRow,
    decode_json,
    decode_row,
    loader_transforms,
    split_row,
    training_loader,
    transform_rows,
    transforms_json,
)
from pipeprof.analysis.variation import run_variation, with_variation
from pipeprof.analysis.verdict import (
    Verdict,
    verdict_from_attribution,
    with_memory_note,
    with_transforms,
)
from pipeprof.analysis.verification import Verification, rerun_noise, verification
from pipeprof.analysis.windows import Throughput, throughput_windows
from pipeprof.analysis.worker_start import with_start_verdict, with_worker_start_note, worker_start_summary
from pipeprof.resource_use import CpuUse, DiskUse, GpuUse, MemoryUse, UssSnapshot
from pipeprof.run_check import Damage
from pipeprof.run_folder import Run
from pipeprof.run_meta import JobInfo, JsonObject, Timing, as_object

SUMMARY_SCHEMA_VERSION = 2  # 2 (issue 13): loading times renamed with their units; bottleneck from the verdict, "unknown" added

# final_loss and accuracy describe the end of training, not its average.
TAIL_FRACTION = 0.10


def bottleneck(verdict: Verdict) -> tuple[str, Reason]:
    """summary.json's ``bottleneck`` and ``bottleneck_reason``: the verdict's class in its coarse form
    (``verdict.COARSE_CLASSES``) and the reason (``render.verdict_text`` words it), from the verdict's own
    evidence and the cut-offs it was judged by."""
    klass = verdict.coarse
    evidence = verdict.evidence
    wait, h2d = evidence.get("data_wait_fraction"), evidence.get("h2d_fraction")
    if klass == "unknown" or wait is None:
        return klass, Reason("bottleneck_unknown", {"counted_steps": evidence.get("counted_steps") or 0,
                                                    "min_counted_steps": MIN_COUNTED_STEPS})
    if klass == "compute":
        return klass, Reason("bottleneck_compute", {"data_wait_fraction": wait,
                                                    "cut_fraction": COMPUTE_BOUND_FRACTION})
    if klass == "h2d":
        return klass, Reason("bottleneck_h2d", {"h2d_fraction": h2d or 0.0, "cut_fraction": H2D_BOUND_FRACTION,
                                                "data_wait_fraction": wait})
    balanced = klass == "balanced"
    if verdict.degree == "input-bound":
        return klass, Reason("bottleneck_input", {"data_wait_fraction": wait, "cut_fraction": INPUT_BOUND_FRACTION,
                                                  "no_single_cause": balanced})
    return klass, Reason("bottleneck_partly_input", {
        "data_wait_fraction": wait, "low_fraction": COMPUTE_BOUND_FRACTION, "high_fraction": INPUT_BOUND_FRACTION,
        "no_single_cause": balanced})


def _in_window(samples: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    start_s, end_s = window
    if samples.empty or math.isnan(start_s):
        return samples.iloc[0:0]
    return samples.loc[(samples["t_s"] >= start_s) & (samples["t_s"] <= end_s)]


def _stat(series: pd.Series, how: str) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna()
    if values.empty:
        return None  # not measured: null in JSON, never a silent zero
    return float(getattr(values, how)())


@dataclass(frozen=True)
class ScriptSections:
    """A script's own summary.json keys (``pipeprof profile`` / ``pipeprof.profile()``): what ran
    (``script``, with its wall time and the settings set from outside), its ``loaders`` and the ``step_source``."""

    script: JsonObject | None = None  # run.json's ``script`` with the wall time and the overrides
    loaders: list[JsonObject] | None = None  # run.json's ``loaders``, each with its transforms and decode
    step_source: str | None = None


@dataclass(frozen=True)
class Summary:
    """One run's summary: the analysis stages' records and the statistics reported as they are.

    ``to_json()`` is summary.json (docs/summary-json.md; ``pipeprof/schemas/summary.schema.json``) but the
    sentences ``pipeline.derive.summary_document`` writes in.
    ``bottleneck`` and ``bottleneck_why`` are the verdict's coarse class and its reason (summary.json's
    ``bottleneck_reason`` once worded, at the edge, by ``render.verdict_text``);
    ``cpu``, ``memory`` and ``disk`` are typed (``pipeprof.resource_use``), and ``timing`` (``run_meta.Timing``).
    Every other summary.json key is a field of its own name; ``script`` (a script's three keys), ``damage``
    (a damaged folder's), ``light`` (``profile --light``) and ``sampled`` (``attach``) are written only where
    the run has them.
    """

    scenario: str
    device: str | None
    steps: int
    warmup_steps: int
    samples: int
    duration_s: float
    samples_per_s: float | None
    step_time_s: StepTime  # median, p90, mean of counted steps
    fractions: dict[str, float]  # data_wait, h2d, compute, other: shares of counted step time (NaN: no steps)
    attribution: Attribution
    verdict: Verdict
    recommendations: tuple[Recommendation, ...]
    ranks: tuple[RankEntry, ...] = ()  # a distributed job's ranks (analysis.ranks); empty for one process
    straggler: Straggler | None = None  # which rank sets the job's pace; None for one process
    # One per recommendation, in order (analysis.intervals): summary.json's item ``interval``.
    intervals: tuple[Interval, ...] = ()
    # summary.json's resource sections (pipeprof.resource_use): what the renderers read as typed records
    cpu: CpuUse = field(default_factory=CpuUse)
    memory: MemoryUse = field(default_factory=MemoryUse)
    disk: DiskUse = field(default_factory=DiskUse)
    timing: Timing = field(default_factory=Timing)  # which clock timed the steps, per part (run.json's)
    gpu: GpuUse | None = None  # NVML's utilisation and memory over the counted window; None: no GPU
    device_memory: DeviceMemory | None = None  # torch.cuda's peaks and the creep check (analysis.device_memory)
    loading: LoadingSummary | None = None  # the workers' loading times and its split (analysis.loading)
    transforms: tuple[TransformRow, ...] | None = None  # the training loader's transforms, costliest first
    decode: DecodeRow | None = None
    cache: CacheCheck | None = None  # the page cache check (analysis.cache)
    final_loss: float | None = None
    accuracy: float | None = None
    absences: dict[str, str] = field(default_factory=dict)  # what was not measured, and why
    steady: Steady | None = None  # the steady-state stop, as recorded
    status: str | None = None  # complete, interrupted, failed; damaged where load_run set something aside
    error: str | None = None
    job: JobSection | None = None  # a distributed job's: its id, world size, nodes, launcher and median rank
    script: ScriptSections | None = None  # None: not a script's run (no script keys in summary.json)
    verification: Verification | None = None  # run --verify: the top recommendation predicted against measured
    throughput: Throughput | None = None  # samples/s in windows of the counted steps (analysis.windows)
    code_profile: CodeView | None = None  # cProfile and py-spy (analysis.code_view), each absent when off
    damage: tuple[Damage, ...] = ()  # a damaged folder's set-aside rows and keys (status "damaged")
    light: LightSection | None = None  # profile --light: the windows' timeline and its change point
    sampled: SampledSection | None = None  # attach: the stacks' shares, workers, timeline and loader
    reason: Reason | None = None  # bottleneck_reason where it is not the verdict's own (an attach, a summary read back)
    # final_loss and accuracy: means over this last share of the counted steps
    tail_fraction: ClassVar[float] = TAIL_FRACTION

    @property
    def bottleneck(self) -> str:
        return self.verdict.coarse

    @property
    def bottleneck_why(self) -> Reason:
        """summary.json's ``bottleneck_reason`` before it is worded."""
        return self.reason if self.reason is not None else bottleneck(self.verdict)[1]

    def _intervals(self) -> tuple[Interval, ...]:
        if len(self.intervals) == len(self.recommendations):
            return self.intervals
        return tuple(none("not computed for these recommendations") for _ in self.recommendations)

    def _sections(self) -> JsonObject:
        """summary.json's keys between ``timing`` and ``attribution``, in the order they have always had."""
        out: JsonObject = {
            "gpu": self.gpu.to_json() if self.gpu is not None else None,
            "device_memory": self.device_memory.to_json() if self.device_memory is not None else None,
            "loading": self.loading.to_json() if self.loading is not None else None,
            "transforms": [t.to_json() for t in self.transforms] if self.transforms is not None else None,
            "decode": self.decode.to_json() if self.decode is not None else None,
            "cache": self.cache.to_json() if self.cache is not None else None,
            "final_loss": self.final_loss, "accuracy": self.accuracy, "absences": dict(self.absences),
            "steady": self.steady.to_json() if self.steady is not None else None, "status": self.status, "error": self.error,
            "job": self.job.to_json() if self.job is not None else None,
        }
        if self.script is not None:
            out.update(script=self.script.script, loaders=self.script.loaders, step_source=self.script.step_source)
        out.update(verification=self.verification.to_json() if self.verification is not None else None,
                   throughput=self.throughput.to_json() if self.throughput is not None else None,
                   code_profile=self.code_profile.to_json() if self.code_profile is not None else None)
        if self.damage:
            out["damage"] = [d.to_json() for d in self.damage]
        if self.light is not None:
            out["light"] = self.light.to_json()
        if self.sampled is not None:
            out["sampled"] = self.sampled.to_json()
        return out

    def to_json(self) -> JsonObject:
        return {
            "schema_version": SUMMARY_SCHEMA_VERSION, "scenario": self.scenario, "device": self.device,
            "steps": self.steps, "warmup_steps": self.warmup_steps, "samples": self.samples,
            "duration_s": self.duration_s, "samples_per_s": self.samples_per_s, "step_time_s": self.step_time_s.to_json(),
            "fractions": dict(self.fractions), "bottleneck": self.bottleneck,
            "cpu": self.cpu.to_json(), "memory": self.memory.to_json(),
            "disk": self.disk.to_json(), "timing": self.timing.to_json(), **self._sections(),
            "attribution": self.attribution.to_json(), "verdict": self.verdict.to_json(),
            "recommendations": [{**r.to_json(), "interval": i.to_json()}
                                for r, i in zip(self.recommendations, self._intervals(), strict=True)],
            "ranks": [r.to_json() for r in self.ranks],
            "straggler": self.straggler.to_json() if self.straggler is not None else None,
        }


def _nan_for_null(values: Any) -> dict[str, float]:
    return {k: math.nan if v is None else v for k, v in as_object(values).items()}


def summary_from_json(data: Any) -> Summary:
    """The inverse of ``Summary.to_json``: a summary.json read back (``run_folder.read_summary``), for the
    renderers and commands that compare runs already saved. Lenient: a key a summary lacks (an older one) is
    at its default, and ``to_json`` of the result writes the same summary.json again."""
    d = as_object(data)
    verdict = Verdict.from_json(d.get("verdict"))
    recs = [r for r in d.get("recommendations") or [] if isinstance(r, dict)]
    script = (ScriptSections(script=d.get("script"), loaders=d.get("loaders"), step_source=d.get("step_source"))
              if any(k in d for k in ("script", "loaders", "step_source")) else None)
    reason = d.get("bottleneck_reason")
    return Summary(
        scenario=str(d.get("scenario") or ""), device=d.get("device"), steps=int(d.get("steps") or 0),
        warmup_steps=int(d.get("warmup_steps") or 0), samples=d.get("samples") or 0,
        duration_s=float(d.get("duration_s") or 0.0), samples_per_s=d.get("samples_per_s"),
        step_time_s=StepTime.from_json(d.get("step_time_s")), fractions=_nan_for_null(d.get("fractions")),
        attribution=Attribution.from_json(d.get("attribution")), verdict=verdict,
        recommendations=tuple(Recommendation.from_json(r) for r in recs),
        intervals=tuple(Interval.from_json(r.get("interval")) for r in recs),
        ranks=tuple(RankEntry.from_json(r) for r in d.get("ranks") or [] if isinstance(r, dict)),
        straggler=Straggler.from_json(d.get("straggler")),
        cpu=CpuUse.from_json(d.get("cpu")), memory=MemoryUse.from_json(d.get("memory")),
        disk=DiskUse.from_json(d.get("disk")), timing=Timing.parse(d.get("timing")),
        gpu=GpuUse.from_json(d.get("gpu")), device_memory=DeviceMemory.from_json(d.get("device_memory")),
        loading=LoadingSummary.from_json(d.get("loading")),
        transforms=(tuple(TransformRow.from_json(t) for t in d["transforms"])
                    if isinstance(d.get("transforms"), list) else None),
        decode=DecodeRow.from_json(d.get("decode")), cache=CacheCheck.from_json(d.get("cache")),
        final_loss=d.get("final_loss"), accuracy=d.get("accuracy"),
        absences={k: v for k, v in as_object(d.get("absences")).items() if isinstance(v, str)},
        steady=Steady.from_json(d.get("steady")), status=d.get("status"),
        error=d.get("error"), job=JobSection.from_json(d.get("job")), script=script,
        verification=Verification.from_json(d.get("verification")), throughput=Throughput.from_json(d.get("throughput")),
        code_profile=CodeView.from_json(d.get("code_profile")),
        damage=tuple(Damage.from_json(x) for x in d.get("damage") or [] if isinstance(x, dict)),
        light=LightSection.from_json(d.get("light")), sampled=SampledSection.from_json(d.get("sampled")),
        reason=Reason.written(reason) if isinstance(reason, str) else None)


def as_summary(value: Summary | Mapping[str, Any]) -> Summary:
    """``value`` itself, or a summary.json's dict read back (``summary_from_json``): what the renderers take."""
    return value if isinstance(value, Summary) else summary_from_json(value)


def summary_record(run: Run, probe: JsonObject | None = None) -> Summary:
    """The summary of ``run``; its ``to_json()`` is the summary.json contract (see docs/summary-json.md).

    ``probe`` is the JSON of ``pipeprof probe`` (machine ceilings; default: the
    one ``pipeprof run`` stored in run.json when the machine had been probed); without it
    the disk comparison in ``attribution`` is absent, with the reason. Keys added
    on top of docs/summary-json.md:

    * ``attribution``: the direct evidence, every number with its unit in its
      name (``attribution.attribution``: ``step``, ``loading``, ``cpu``, ``disk``,
      ``gpu``, ``prefetch``, ``data``, ``cache``; ``{"absent": reason}`` for
      what was not measured).
    * ``verdict``: ``{"class", "rule", "degree", "sentence", "evidence",
      "notes"}`` (``verdict.verdict``); ``class`` is one of ``compute``,
      ``input:fetch``, ``input:prep``, ``input:main``, ``input:start``, ``h2d``, ``balanced``, ``unknown``;
      ``bottleneck`` is its coarse form (``verdict.coarse``: ``input`` for every ``input:*``)
      and ``bottleneck_reason`` says it in words, so the two never disagree.
    * ``recommendations``: ``[{"change", "predicted_samples_per_s",
      "predicted_speedup", "reason", "model", "interval"}]`` ranked by predicted speed-up
      (``recommend.recommend``; its model is in that module's docstring), those whose
      speed-up interval reaches x1.0 (``interval.may_not_help``) after the certain gains;
      ``interval``: ``{"samples_per_s": [lo, hi], "speedup": [lo, hi], "level", "method",
      "may_not_help"}`` (``intervals.intervals``; null bounds with the reason in ``method``).
    * ``verification``: predicted against measured speed-up of the top
      recommendation after ``run --verify`` (``verification.verification``), with
      ``within_interval`` (the measured samples/s inside the recommendation's interval),
      else null.
    * ``code_profile``: ``{"cprofile", "pyspy"}``, the code-level view
      (``hotspots.code_profile``), each ``{"absent": reason}`` when off.
    * ``transforms``: the training loader's leaf transforms, costliest first, ``[{"name", "per_sample_s",
      "cpu_per_sample_s", "calls", "share_of_prep", "random"}]``; ``decode``: ``{"per_sample_s",
      "cpu_per_sample_s", "calls", "how"}``; ``loading.split``: fetch / core wait / decode / transform / other
      per sample (``analysis.transforms``). Null where nothing was timed (the reason in ``absences.transforms``
      where the run recorded one); a script's ``loaders`` each carry their own ``transforms`` and ``decode``.
    * ``status`` ``damaged`` and ``damage`` (``[{"file", "line", "reason"}]``, only then): rows, files or
      run.json keys that load_run set aside (``run_check``); the rest is what was analysed.
    * ``ranks`` and ``straggler``: a distributed job's (``run.ranks``; ``job_record``);
      ``[]`` and null for one process.
    """
    record = job_record(run, probe) if run.ranks else _one_process(run, probe)
    return marked_damaged(record, run)


def marked_damaged(record: Summary, run: Run) -> Summary:
    """``record`` with status ``damaged`` and its ``damage`` list where load_run set something aside: a damaged
    folder's summary never looks healthy (what was recorded as its status stays in run.json)."""
    if not run.damage:
        return record
    return dataclasses.replace(record, status="damaged", damage=tuple(run.damage))


def job_record(run: Run, probe: JsonObject | None = None) -> Summary:
    """The summary of a distributed job (``run.ranks``): each rank summarized alone; the job's keys are its
    median rank's (``ranks.median_index``: ``job.median_rank``) but ``samples`` and ``samples_per_s``, the sums
    over the ranks, and ``status`` / ``error``, the job's own where run.json records them (a rank that failed
    fails the job); ``recommendations`` are the job's (``ranks.job_recommendations``), ``ranks`` one entry per
    rank and ``straggler`` the rank that sets the pace (``ranks.straggler``)."""
    info = run.info
    probe = probe if probe is not None else info.probe
    summaries = [_one_process(rank_run, probe) for rank_run in run.ranks]
    results = [RankResult(run=rank_run, steps=s.steps, samples=s.samples, samples_per_s=s.samples_per_s,
                          fractions=s.fractions, loading=s.loading, verdict=s.verdict,
                          cpu=s.attribution.cpu, recommendations=s.recommendations)
               for rank_run, s in zip(run.ranks, summaries, strict=True)]
    median = median_index(run.ranks, info.job.median_rank if info.job else None)
    rates = [s.samples_per_s for s in summaries if s.samples_per_s is not None]
    job_samples_per_s = float(sum(rates)) if rates else None
    paced = straggler(run.ranks)
    job = info.job or JobInfo()
    job_recs = tuple(job_recommendations(results, median, paced, job_samples_per_s))
    return dataclasses.replace(
        summaries[median], scenario=run.name, samples=sum(s.samples for s in summaries),
        samples_per_s=job_samples_per_s, recommendations=job_recs, status=info.status, error=info.error,
        # a job's --verify re-run is the job's (run.json's verification), measured against the job's samples/s
        verification=verification(info.verification, job_samples_per_s),
        job=JobSection(id=job.id, world_size=job.world_size or len(run.ranks), nodes=tuple(job.nodes),
                       launcher=job.launcher, median_rank=results[median].rank, untraced=len(job.untraced)),
        intervals=tuple(none("a distributed job's prediction is not resampled (its ranks are, one by one)")
                        for _ in job_recs),
        ranks=tuple(rank_entry(r) for r in results), straggler=paced)


def _one_process(run: Run, probe: JsonObject | None) -> Summary:
    """The summary of one process's records (a single-process run, or one rank of a job)."""
    steps = run.steps
    counted = counted_steps(steps)
    n = len(counted)
    step_s = counted["step_s"].to_numpy(dtype=float)
    duration_s = float(step_s.sum())
    samples = int(counted["samples"].sum())
    info = run.info
    attr = attribution(run, probe if probe is not None else info.probe)
    frac = attr.fractions
    memory = device_memory(run)
    inside, train = loader_transforms(run), training_loader(run)
    trained = inside.get(train) if train is not None else None  # the training loader's, None: nothing timed
    # the verdict names the costliest transform or decode where CPU preprocessing sets the pace (issue 18)
    judged = with_transforms(with_memory_note(verdict_from_attribution(attr), memory),
                             trained,
                             fetch_off_cpu=attr.loading.split == OFF_CPU_SPLIT)
    started = worker_start_summary(info.worker_starts, script_wall_s(run)) if info.is_script else None
    judged = with_worker_start_note(judged, started)  # spawned workers' start-up, where it matters
    judged = with_start_verdict(judged, started, steps)  # ... and the cause, where the loop waits mostly for it
    # windows of the run judged differently (the machine's other load came and went): said, not one class
    judged = with_variation(judged, run_variation(steps, run.samples, _cores(run)), attr)

    tail = counted.tail(max(1, math.ceil(TAIL_FRACTION * n))) if n else counted
    tail_samples = float(tail["samples"].sum())

    window = counted_window_s(steps)
    during = _in_window(run.samples, window)
    processes = run.processes

    samples_per_s = samples / duration_s if duration_s > 0 else None
    cpu = CpuUse(cores=info.environment.cpu_cores,
                 mean_util=_stat(during.get("cpu_util_pct", pd.Series(dtype=float)), "mean"),
                 peak_util=_stat(during.get("cpu_util_pct", pd.Series(dtype=float)), "max"),
                 main_mean_pct=_stat(during.get("main_cpu_pct", pd.Series(dtype=float)), "mean"),
                 workers_mean_pct=_stat(during.get("workers_cpu_pct", pd.Series(dtype=float)), "mean"))
    rss = MemoryUse(peak_rss_bytes=_stat(run.samples.get("tree_rss_bytes", pd.Series(dtype=float)), "max"),
                    peak_main_rss_bytes=_stat(run.samples.get("main_rss_bytes", pd.Series(dtype=float)), "max"),
                    # Workers that never existed have no memory: not measured (null), never a sampled 0.
                    peak_workers_rss_bytes=(_stat(run.samples.get("workers_rss_bytes", pd.Series(dtype=float)), "max")
                                            if had_workers(run) else None),
                    uss=uss_snapshot(processes))
    disk = DiskUse(mean_read_bytes_per_s=_stat(during.get("read_bytes_per_s", pd.Series(dtype=float)), "mean"),
                   read_bytes=_read_bytes(processes))
    loading = _with_split(attr.loading_summary, trained)
    script = None
    if info.is_script:  # pipeprof profile / pipeprof.profile(): what ran, and its loaders
        recorded = info.script.recorded if info.script else {}  # {}: run.json's was set aside as damage
        if isinstance(recorded, dict):  # the script's own wall time, beside the counted steps' duration_s
            recorded = {**recorded, "wall_s": script_wall_s(run)}
            if info.overrides:  # pipeprof profile --loader / --threads: what was set from outside
                recorded["overrides"] = info.overrides
        if started is not None and loading is not None:  # spawned / forkserver workers
            loading = dataclasses.replace(loading, worker_start=started.to_json())
        script = ScriptSections(script=recorded, loaders=_loaders_inside(info.loaders_recorded, inside),
                                step_source=info.step_source)
    probe = probe if probe is not None else info.probe
    listed = recommend(run, attr, judged)
    noise = rerun_noise(info.verification)  # where --verify repeated runs: the machine's own re-run noise
    recs, bounds = ranked(listed, intervals(run, listed, probe=probe, attr=attr, rerun_cv=noise.cv,
                                                  rerun_measured=noise.measured_cv is not None))
    return Summary(
        scenario=run.name, device=info.device, steps=n, warmup_steps=int(steps["warmup"].astype(bool).sum()),
        samples=samples, duration_s=duration_s, samples_per_s=samples_per_s,
        step_time_s=StepTime(median=float(np.median(step_s)) if n else None,
                             p90=float(np.percentile(step_s, 90)) if n else None,
                             mean=float(step_s.mean()) if n else None),
        fractions=frac, attribution=attr, verdict=judged,
        recommendations=recs, intervals=bounds, cpu=cpu, memory=rss, disk=disk,
        timing=info.timing.with_parts(),
        gpu=_gpu_summary(during) if info.gpu.available else None,
        device_memory=memory, loading=loading,
        # inside the sample (analysis.transforms): the training loader's transforms, costliest first, and decode
        transforms=transform_rows(trained),
        decode=decode_row(trained.decode if trained is not None else None),
        cache=attr.cache_check,
        final_loss=float(tail["loss"].mean()) if n else None,
        accuracy=_accuracy(tail["correct"], tail_samples),
        absences=dict(info.absences), steady=Steady.from_json(info.steady),
        # How the run ended (run.json's status and error): complete, interrupted (Ctrl-C, SIGTERM) or failed.
        status=info.status, error=info.error, script=script,
        verification=verification(info.verification, samples_per_s, checked_interval(info.verification, recs, bounds),
                                  noise),
        throughput=throughput_windows(run.steps), code_profile=code_profile(run))


def _with_split(loading: LoadingSummary | None, lt: LoaderTransforms | None) -> LoadingSummary | None:
    """summary.json ``loading`` with ``split``: fetch / core_wait / decode / transform / other per sample
    (``analysis.transforms``), null where neither a transform nor a decode call was timed."""
    if loading is None:
        return None
    return dataclasses.replace(loading, split=split_row(lt.split if lt is not None else None))


def _loaders_inside(loaders: Any, inside: dict[int, LoaderTransforms]) -> Any:
    """A script's ``loaders``, each with its ``transforms`` and ``decode`` (null where none was timed); none where
    run.json's were not a list of objects (set aside as damage: ``run_check.check_meta``)."""
    if not isinstance(loaders, list):
        return []
    out = []
    for d in loaders:
        if not isinstance(d, dict):
            continue
        number = d.get("number")
        lt = inside.get(number) if isinstance(number, int) and not isinstance(number, bool) else None
        out.append({**d, "transforms": transforms_json(lt), "decode": decode_json(lt.decode if lt else None)})
    return out


def checked_interval(record: JsonObject | None, recommendations: tuple[Recommendation, ...],
                     bounds: tuple[Interval, ...]) -> Interval | None:
    """The interval of the recommendation a ``--verify`` re-run checked (run.json's ``verification.change``),
    or None when none of the recommendations is that change."""
    change = record.get("change") if isinstance(record, dict) else None
    if not isinstance(change, dict) or not change:
        return None
    return next((i for r, i in zip(recommendations, bounds, strict=True) if r.change == change), None)


def _accuracy(correct: pd.Series, samples: float) -> float | None:
    """Correct over samples; None when not recorded (a script's own loop keeps its accuracy to itself)."""
    total = pd.to_numeric(correct, errors="coerce").sum(min_count=1)
    return float(total) / samples if samples and pd.notna(total) else None


def uss_snapshot(processes: pd.DataFrame) -> UssSnapshot | None:
    """Largest USS seen per role, summed over the processes of one snapshot."""
    if processes.empty or "uss_bytes" not in processes:
        return None
    snaps = processes.dropna(subset=["uss_bytes"])
    if snaps.empty:
        return None
    per_tick = snaps.groupby(["t_s", "role"])["uss_bytes"].sum().unstack("role")
    return UssSnapshot(main=float(per_tick["main"].max()) if "main" in per_tick else None,
                       workers=float(per_tick["worker"].max()) if "worker" in per_tick else None,  # none: not measured
                       snapshots=int(len(per_tick)))


def had_workers(run: Run) -> bool:
    """Whether any DataLoader worker process was seen: a ``worker`` in the process snapshots or a sampler
    tick counting one (``samples.workers``)."""
    processes, samples = run.processes, run.samples
    if not processes.empty and "role" in processes and bool((processes["role"] == "worker").any()):
        return True
    counts = pd.to_numeric(samples.get("workers", pd.Series(dtype=float)), errors="coerce")
    return bool((counts > 0).any())


def script_wall_s(run: Run) -> float | None:
    """A profiled script's wall time in seconds: run.json's ``script.wall_s`` when recorded, else the system
    sampler's span (first to last sample: it watches the script from its start to its end, to within one
    sampling interval); None when neither is there."""
    script = run.info.script
    recorded = script.wall_s if script is not None else None
    if recorded is not None:
        return recorded
    t_s = pd.to_numeric(run.samples.get("t_s", pd.Series(dtype=float)), errors="coerce").dropna()
    return float(t_s.max() - t_s.min()) if len(t_s) >= 2 else None


def _read_bytes(processes: pd.DataFrame) -> float | None:
    """Disk bytes read by the process tree: each process's last counter minus its first."""
    if processes.empty:
        return None
    per_pid = processes.dropna(subset=["read_bytes"]).groupby("pid")["read_bytes"]
    if per_pid.ngroups == 0:
        return None
    return float((per_pid.max() - per_pid.min()).sum())


def _gpu_summary(during: pd.DataFrame) -> GpuUse:
    def col(name: str) -> pd.Series:
        return during.get(name, pd.Series(dtype=float))

    return GpuUse(
        mean_util_pct=_stat(col("gpu_util_pct"), "mean"),
        peak_mem_used_bytes=_stat(col("gpu_mem_used_bytes"), "max"),
        mean_pcie_rx_bytes_per_s=_stat(col("pcie_rx_bytes_per_s"), "mean"),
        mean_pcie_tx_bytes_per_s=_stat(col("pcie_tx_bytes_per_s"), "mean"),
        # The training process tree's own share (NVML per-process), beside the device's total above.
        mean_proc_util_pct=_stat(col("gpu_proc_util_pct"), "mean"),
        peak_proc_mem_bytes=_stat(col("gpu_proc_mem_bytes"), "max"),
        mean_sm_clock_mhz=_stat(col("gpu_sm_clock_mhz"), "mean"),
        mean_power_w=_stat(col("gpu_power_w"), "mean"),
    )


def _cores(run: Run) -> int | None:
    """The cores the sampler's machine-wide CPU share is of: its per-core columns, else the environment's."""
    per_core = [c for c in run.samples.columns if str(c).startswith("cpu_core")] if run.samples is not None else []
    if per_core:
        return len(per_core)
    cores = run.info.environment.cpu_cores
    return int(cores) if isinstance(cores, (int, float)) and not isinstance(cores, bool) and cores > 0 else None
