"""Recommendations: what to change, ranked by the speed-up an explicit model predicts.

Pure functions over one run's records, its ``attribution`` and its ``verdict``
(no torch). Every recommendation is ``{"change", "predicted_samples_per_s",
"predicted_speedup", "reason", "model"}``: ``change`` holds scenario keys as
``--set`` takes them (``{"loader.num_workers": 2}``), or is empty for advice
that is a code change (then ``code_change`` says what to write) and for the
honest negative; ``predicted_speedup`` is the prediction over the *measured*
samples/s of the run. Only changes predicted to gain at least ``MIN_GAIN``
are listed, never one equal to the run's current settings (``is_no_op``);
when none is, the list holds one entry with an empty change and
the reason in words (compute-bound, saturated cores, or nothing in the model).

``predict_change(run, attribution, verdict, change)`` predicts any change of
the kinds below (``PREDICTABLE_KEYS``; ``{WHOLE_BATCHES: True}`` for the code
change of taking whole batches), recommended or not; every recommendation's
number comes from the same arithmetic (``_Model.predict``).

What is measured, what is assumed
=================================

Measured after a scenario's run (``measure.what_if``, run.json ``what_ifs``,
each probe's windows kept as ``samples_per_s_per_window``, the model reading
their median ``samples_per_s``, each read at the run's pace where measured
(``analysis.pace``: the run's own loop measured again among them);
probes of at most 0.35 s each, 5.5 s in all:
a median 5.3 s a run on 2 cores with the pace probe and the trained probes
(3.8-5.7 s; the last probe started can overrun, and a trained probe of slow
batches stretches to 1.2 s), 2.8 s before them; the start-up of 1-3
forked workers 0.05-0.25 s each):

* ``C_loop`` (``device_loop``): the runner's own training loop over the data
  held on the device, taken by a shuffled index, as ``data.storage = "device"``
  runs: predicts ``data.storage = "device"`` itself, and is ``C_free``, the
  compute with nothing loading beside it, wherever the model used ``C_alone``.
  Why: ``C_alone`` (one batch repeated, ``compute_ceiling``) predicted 17–31k
  samples/s for device-resident runs measured at 13.4–19.9k (12 of 12
  predictions of BENCHMARKS.md's first yardstick too high; median |error|
  29%): the real loop still indexes, shuffles and reads the loss per step.
* ``L0`` (``loader_alone``): the run's own dataset through a 0-worker
  DataLoader with no training: ``p0 = 1/L0`` is what each sample costs the
  training process at ``num_workers = 0`` (indexing, decode, transform,
  collate and the loader's bookkeeping), so ``X(0) = 1/(p0 + 1/C_free)``.
  For data read cold the probe reads it cold too (its files dropped from the
  page cache first: ``what_ifs`` entries with ``cold: true``); where it could
  not, the loading records' ``p``. From a cold run at 0 workers, its own
  loading records' ``p`` all the same: they measured a whole pass, whose
  pages warm as it goes (1.3 samples a page here), where the probe's short
  windows right after the drop read every page cold (memmap-cold 0 workers
  -> 1 thread from the probe: -24% and -27% in two yardstick invocations).
* ``p_ram = 1/R`` (``ram_loader``): decoded samples in RAM through a 0-worker
  loader: what ``data.storage = "ram"`` makes per sample (the indexing and
  collate that remain, which the analytical model dropped: images at 0
  workers, predicted 31.8k, measured 18.5k). With workers, the k-worker fixed
  point below with ``u = p_ram + send``, ``L_k = k/u``, ``S`` none, ``q`` and
  the start-up as probed for the run's data (the same batches' bytes), else
  estimated: the workers no longer decode, so compute gets back what their
  stall took (the supply-only ``min(C, k/p_ram)`` kept the run's stalled
  ``C``: jpeg-decode at 1 worker predicted 8,480, measured 13,106; the fixed
  point 13,009).
* whole batches at 0 workers: one index per batch, as the device loop takes
  it: ``1/(1/C_loop + h2d per sample)`` (the run's copy to the device added).
* ``C_loop(t)`` (``device_loop_threads``: the same loop at 1 torch thread,
  CPU training with more, or at the cores from a run at 1; linear in the
  threads between the two probes, held beyond them): compute at
  ``train.threads = t`` is ``C_loop(t)`` from a run without workers or going
  to none; from a run with workers, the run's ``C`` (measured beside them)
  times ``C_loop(t)/C_loop(T)``, even where the change leaves the workers a
  core of their own (``k + t <= N``), with the run's ``C`` taken back from
  its workers' modelled stall in proportion to how busy they were:
  ``C^(1−b)·C_free^b``, ``b = u·X`` the workers' busy cores, at most 1
  (``C_free`` as below). The loop alone at ``t`` predicted +43%, +39% and
  +34% for quick at 1 worker and 1 thread in three yardstick invocations
  (measured 14.3-18.0k, about as fast as at 2 threads: a worker busy 0.2 of
  a core slows compute on this machine even on "its own" core); the run's
  ``C`` scaled alone predicted -9%, -3%, -14% there but -53% for jpeg-decode
  (a worker decoding a full core beside 2 threads: its stall does go with a
  core of its own); ``C_free`` scaled alone +33%, +41%, +29% for quick. The
  geometric blend by ``b`` (no fitted constant) gave over the 12 rows of
  quick, jpeg-decode, memmap-cold and augment-heavy at 1 worker -> 1 thread
  in the three invocations median |error| 5.5%, worst 30% (the run's ``C``
  alone: 8%, 53%). Without the probe, ``C·min(1, t/m)`` (assumed).

k workers, trained (``train_workers``: the runner's training loop fed by a
``k``-worker DataLoader over the run's dataset, for the run's ``k ± 1``, 0
too but for data read cold, at its torch threads): ``num_workers = k`` at
the run's threads is that loop's samples/s, then each counted pass start's
worker start-up added (as below; none at ``k = 0``);
``data.storage = "ram"`` at the run's ``k`` likewise from
``train_ram_workers`` (the loop fed by ``k`` workers over decoded samples in
RAM), and ``train.threads`` at the run's ``k`` from ``train_threads`` (the
loop fed by the run's ``k`` workers at the other number of threads). A
measurement of the changed loop itself, where the fixed point below
composes the loader alone with a stall modelled on the workers' CPU: compute
beside a worker slows where that stall is 0 (a worker with a core of its own:
jpeg-decode 1 worker -> decoded in RAM at 1 thread predicted 9,884, measured
4,826-5,464, the runs computing at 5,750-6,470 where the loop alone made
7,882-8,425). On 4 scenarios at 1 thread, 0-2 workers, one run each (16
changes of ``num_workers`` between them, the measured value one fresh run):
median |error| 5.5%, worst 12% trained; 8%, 31% the fixed point. Changes it
did not measure (other threads, other ``k``, a script's run) take the fixed
point.

k workers, measured (``loader_workers``: the run's dataset through a
``k``-worker DataLoader alone, for the run's ``k ± 1`` first, then more up to
``2N`` while the budget lasts): per ``k`` the loader's rate ``L_k``, the
training process's own CPU per sample receiving a batch ``q_k`` (its main
thread's CPU across ``next()``: unpickling, the shared-memory handover) and
the workers' CPU per sample ``u_k``. ``num_workers = k`` for a probed ``k``
(with threads ``T``, those of a ``train.threads`` change where given) is the
fixed point of

    X = min(L_k, W/u_k, S, 1/(1/C_k + q_k))

* ``q``: from a run with workers, its own wall time receiving a batch that
  was already waiting (the median ``data_wait_s`` per sample of its steps
  with ``ready_batches >= 1``, where at least 10 and a quarter of them had
  one: ``receive_when_ready``); else the probe's ``q_k``. The probe reads
  the main thread's CPU (its own waits for the workers are in its wall
  time), but receiving a batch also waits off the CPU (page faults on the
  batch's shared memory): quick's runs at 1-2 workers took 12.3-15.2 µs a
  sample on steps whose batch was ready, where the probe's CPU read 5-10;
  with the CPU alone, 1 -> 2 workers at 1 thread predicted +28% (+14%
  with the wall time on the same rows) and the run's own k was not
  reproduced; at 2 threads in the two invocations after it +11%, +8%;
* ``W``: the workers' cores, ``k`` where ``k + T <= N``; else time-shared
  (``worker_share``): while the training process computes, a share
  ``X/C_k`` of the time, their fair share ``k·N/(k + T)`` of the ``k + T``
  runnable threads, and while it waits for a batch (its threads idle)
  ``min(k, N)``. The fair share alone, as if the training process never
  waited, put augment-heavy at 0 -> 1 worker (2 threads) at 0.67 of a core
  for a worker measured busy a whole one: too low in four yardstick
  invocations (-40%, -14%, -26%, -22%), as were 1 -> 2 workers there
  (-24%) and for jpeg-decode (-11%). With the time-shared W: augment-heavy
  1 -> 2 workers at 1 thread -21% -> -7% (re-predicted on the same rows);
  in the two invocations after it, at 2 threads, 0 -> 1 worker -28% and
  +15%, 1 -> 2 workers -22% and -24% (still low: the stall beside a worker
  busy a whole core is the rest);
* ``C_k = C_free / exp(STALL·over)``, ``over = min(max(T + w − N, 0), w)``
  the cores the workers (busy ``w = u_k·X``) take beyond those the torch
  threads leave: intra-op regions wait on the threads whose cores are
  shared (``C_free``: with ``threads``, ``C'`` of ``_compute_at``). From a
  run with workers, ``C_free = C·exp(STALL·over_run)``: its own ``C``,
  measured under its workers' stall (``w = u·X_run``, ``u`` of the nearest
  ``k`` probed, else estimated), taken back to no stall (the run's ``C`` is
  measured at the loop's real load; the device-loop probe alone read 24-35k
  where the runs beside it measured C 13-14k at one worker). A script's run
  with workers (no probe, no compute measured alone) takes its ``C_free``
  the same way, for every prediction that needs it (``k = 0`` too).
* then each counted step that begins a pass starting workers (every pass's
  first, or with ``persistent_workers`` a new loader's first only) adds the
  workers' start-up: ``X' = n / (n/X + starts·startup_k)`` (``startup_s`` of
  the probe, else ``STARTUP_S_PER_WORKER·k``).

k workers, estimated (a ``k`` not probed: a script's run, the budget spent,
a cold page cache that could not be dropped): the same fixed point, its costs from the run's production per
sample ``p = io + cpu``: ``u = cpu + send`` (``send`` only from a run without
workers: with them the measured collate already builds the batch in shared
memory), ``L_k = k/(io + u)``, ``q = receive``; per sample ``send =
SEND_S_PER_BATCH/b + SEND_S_PER_BYTE·B`` and ``receive =
RECEIVE_S_PER_BATCH/b + RECEIVE_S_PER_BYTE·B`` (``b`` the batch size, ``B``
the bytes of a sample's tensors: a scenario's 784 float32; a script's
assumed the same).

Calibration (issue 17, this machine: 2 cores, T = 2; 20 runs of 5 workloads,
each setting twice, predictions checked offline against their medians):

* ``STALL = 1.85``: ``ln(C_free/C_k)/over`` measured 1.1-2.4 (median 1.86)
  across quick, jpeg-decode, augment-heavy, plain_loop and trainer_class at
  k = 1 and 2 (``C_free`` the median ``C`` of their 0-worker runs, ``w`` from
  the probes' ``u_k`` or estimated): compute slowed 1.4-5.3x at w = 0.23-0.96
  cores. The earlier ``1 + 3.4·√w`` (fitted on two points) put 1.8x where
  quick measured 1.5-1.8x and 4.0x where augment-heavy measured 4.4-5.3x
  from smaller w; the exponential fits both ends.
* send and receive: the probes' ``u_k − p0`` and ``q_k`` on quick at batch
  32, 128 and 512: receive 0.64, 0.70 and 1.38 ms a batch (0.55 ms + 0.5
  ns/byte), send 1.0, 1.3-1.9 and 3.0 ms (0.9 ms + 1.3 ns/byte); start-up
  0.046-0.06 s at k = 1, 0.08 at 2, 0.12 at 3 (0.04 s a worker).
* checked: a script's 0 -> 1 worker (plain_loop, collate 1 ms) predicted
  +241% by the supply-only model, measured 11,335 from 21,231 (0.53x): the
  estimated fixed point predicts 12,030 (+6%), k = 2 -3%; trainer_class
  0 -> 2 +64% before, -8% now; over all 66 predictions of the offline check
  median |error| 19.2% -> 12.1%, worst 372% -> 50%.

Prefetch (``prefetch_factor``, at the current ``k``): a deeper queue absorbs
bursts, not a supply short of the loop nor a pass's start: the run without
its waits beyond the median wait (the steps that do not begin a pass), at
most the workers' output busy all the time (``X / busy``). The supply-model
``X(k)`` it used predicted 5 of 5 prefetch changes too high (+11% to +57%;
measured within the noise of the run, -1% to +14%).

Still assumed (and the ``model`` says so): the supply with ``k ≥ 1`` workers
where not probed (above), pinned memory (half the copy), whole batches with
workers (90% of fetch and 80% of collate gone), decoded data in RAM with
workers without the RAM loader probe (``throughput`` below), persistent workers (the run without its
re-iterated passes' excess first waits). A prediction that used no what-if
measurement says ``[analytical, no what-if probe: ...]`` in its ``model``,
with the reason from run.json: a run recorded before the probes, a probe
that failed, a script run without ``--steps``.

A script's run (issue 17): pipeprof cannot call a script's training step, so
its what-ifs are measured in the script's own loop after ``--steps`` ended
the run (``script.segments``, run.json ``what_ifs``): the loop fed by
variants of its training loader at ``k ± 1`` workers (``train_workers``),
at the other number of threads (``train_threads``) and, at ``k = 0``, at its
own settings (``train_as_run``, the pace). The model reads them exactly as a
scenario's trained probes. On the yardstick's two fixture scripts at 1
thread (stop 28, before them, the fixed point): plain_loop 0 -> 1 worker
+35% and +25% in two invocations, trainer_class 1 worker -> 2 threads +26%
and +24%, 1 -> 2 workers +21% and +13%.

The model
=========

From counted steps (``n`` samples, step times summed):

* compute ceiling ``C = n / Σ(compute_s + h2d_s)``: the loop with no data
  wait, measured under the run's own contention (workers decoding beside
  torch's intra-op threads slow compute, on a 2-core machine by up to 5x);
  ``C_alone``: training steps on one batch already on the device right after
  the run with nothing else running (``runner.measure_compute_ceiling``, in
  run.json as ``compute_ceiling``; ``C`` when absent). ``C_free`` (``C_loop``
  where measured, else ``C_alone``) is used where the loading leaves the
  cores: data on the device, and the training process making its own
  batches (``k = 0``, and any ``k`` predicted from a run without workers,
  whose ``C`` saw no contention to carry over).
* production per sample ``p = fetch + prep + collate`` (per sample, from the
  loading records); per-worker rate ``r = 1 / p``. ``io`` is the part of ``p``
  that waits on storage rather than a core: ``fetch`` when the data is on disk
  and cold or throttled, else 0 (``cpu = p - io``).
* cores: ``N`` usable cores; the training process needs ``m`` of them to
  train (its CPU %/100; with 0 workers scaled by its non-waiting share,
  since the batch-making moves to the workers); free ``F = max(N - m, 0)``.
  With ``k`` workers they get ``W(k) = min(k, max(F, k·N/(k+T)))`` cores —
  the free cores, but at least their fair share of ``N`` among the ``k + T``
  runnable threads (``T`` torch threads). Each worker then runs at
  ``1 / (io + cpu · k / W(k))``: workers beyond the free cores share them.
  Cores the workers take beyond ``F`` come out of training: ``C`` is scaled
  by ``(N - W(k)) / m`` (at most 1).
* storage ceiling ``S``: with data read from a cold disk, the probe's cold
  random reads per second (one read per sample) and its sequential bytes/s
  over bytes per sample, the smaller; not applied otherwise (warm cache, RAM,
  no probe), which the reason says.

Throughput with ``k ≥ 1`` workers: the fixed point above (measured or
estimated costs). The supply-only form ``X(k) = min(C', k / (io +
cpu·k/W(k)), S)`` (no receive cost, no stall, no start-up) remains for
decoded data in RAM with workers where the RAM loader was not probed, whole
batches with workers, and a run
without a finite compute ceiling. With 0 workers the training process makes
each batch itself: ``X(0) = 1 / (p0 + 1/C_free)`` (``p0 = 1/L0`` where
measured, else ``p``; from a run with workers ``p`` was measured in them,
under their contention, so ``X(0)`` tends low there).

Candidates (each only where it applies):

* ``loader.num_workers``: the best ``k`` in ``0 … max(2N, current + 2)``
  (the smallest within 2% of the best), up or down. A ``k`` with
  ``k + T > N`` comes with ``train.threads = max(1, N - k)`` (never an
  oversubscribed recommendation), compute then at ``C·min(1, threads/m)``.
* ``loader.prefetch_factor`` doubled when supply is bursty: workers, the
  queue empty on >= 30% of steps, the workers busy < 80%: predicted as
  "Prefetch" above (the bursts' waits saved).
* ``loader.persistent_workers``: the first counted step of a pass of a
  loader iterated *again* (the same loader object; never a loader's first
  pass, whose workers start whatever the setting) waits more than two median
  steps longer than the median wait: predict the run without that excess.
  A script that builds a new loader per fit (training loaders with the same
  name and settings) gets no such change — it would keep every old loader's
  workers alive until garbage collection (d2l style: predicted x1.13, ~3x
  slower) — but the code change to build the loader once and reuse it, with
  the risk as its note, predicted without the new loaders' excess.
* whole batches at once (code change: a Dataset ``__getitems__`` or a batch
  sampler) for in-RAM data when fetch + collate are >= 50% of production:
  at 0 workers the measured loop of whole batches (above); with workers
  assume 90% of fetch (per-sample indexing) and 80% of collate (stacking
  one-sample tensors) go away.
* ``data.storage = "ram"`` (decoded samples cached in RAM) when the data is
  on disk and either prep is >= 50% of production for images (decode;
  assumed all decode unless ``transform = "augment"``) or fetch is >= 50%
  for cold or throttled data: fetch (and decode) removed. Where the decode calls were timed
  (``transforms.csv``, issue 18) their measured share of a sample's making decides, the reason cites it, and
  only the measured decode leaves prep (the transforms stay).
* issue 18's code changes from the training loader's measured transforms and decode
  (``transform_advice``: caching the samples after a dominant deterministic prefix followed by random
  transforms, decoding once into RAM, ``torchvision.io.decode_jpeg`` instead of PIL): each saves measured
  seconds per sample (decode_jpeg's an estimate, marked assumed), predicted as the measured rate times
  ``X(k; p − saved) / X(k; p)`` (``throughput`` at the run's ``k``): only the change's own effect moves the
  measured rate. Code changes: ``--verify`` cannot re-run them.
* ``data.storage = "device"`` for data sets up to ``DEVICE_DATA_MAX_BYTES``:
  predict ``C_loop`` (else ``C_alone``).
* ``loader.pin_memory`` on CUDA runs with h2d >= 5%: assume pinning halves
  the copy time.
* ``train.threads = N - k`` when workers and torch threads oversubscribe the
  cores: compute assumed to keep ``C·min(1, threads'/m)`` (the cores the
  training process really used), workers get ``N - threads'`` cores. Not
  modelled: torch's intra-op threads stalling on each other when any other
  load shares the cores, so these predictions are conservative.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof import format as fmt
from pipeprof.analysis.advice_text import script_text
from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.pace import paced, probes_pace
from pipeprof.analysis.steps import counted_steps
from pipeprof.analysis.thresholds import (
    BURSTY_EMPTY_FRACTION,
    COMPUTE_BOUND_FRACTION,
    MIN_COUNTED_STEPS,
    MIN_GAIN,
    NEAR_BEST,
    PIN_MEMORY_H2D,
    SATURATED_FRACTION,
    SHARE_DOMINATES,
    SLOW_EPOCH_START_STEPS,
    WORKERS_BUSY,
)
from pipeprof.analysis.transform_advice import DECODE_IN_RAM, PrepSaving, decode_share, decode_words, prep_savings
from pipeprof.analysis.transforms import LoaderTransforms, training_transforms
from pipeprof.analysis.verdict import Verdict
from pipeprof.loader_rules import pins_memory, prefetch_factor, worker_only_conflicts
from pipeprof.run_folder import Run, as_dict
from pipeprof.scenario import ON_DISK, SAMPLE_BYTES

# The model's assumptions for whole batches at once: what is left of per-sample fetch and of collate.
BATCH_FETCH_KEEPS_FETCH = 0.1
BATCH_FETCH_KEEPS_COLLATE = 0.2
DEVICE_DATA_MAX_BYTES = 2 * 1024**3
# Workers beside torch's intra-op threads on full cores: compute slows by exp(STALL·cores taken beyond the
# free ones) (module docstring, "k workers, measured": the calibration).
STALL = 1.85
# Moving a batch from a worker into the training process where no loader_workers probe measured it (module
# docstring, "k workers, estimated"): the workers' CPU to send it (from a run whose batches the training
# process made itself: with workers, the shared-memory collate is in the measured collate already) and the
# training process's CPU to receive it, per batch and per byte of its tensors; a worker's start-up per pass.
SEND_S_PER_BATCH = 0.9e-3
SEND_S_PER_BYTE = 1.3e-9
RECEIVE_S_PER_BATCH = 0.55e-3
RECEIVE_S_PER_BYTE = 0.5e-9
STARTUP_S_PER_WORKER = 0.04
# The run's own receive time is read from its steps that found a batch waiting, where there are enough of them.
MIN_READY_STEPS = 10
MIN_READY_SHARE = 0.25
# predict_change's key for the code change of taking whole batches (its recommendation's change is empty).
WHOLE_BATCHES = "code.whole_batches"
WHOLE_BATCHES_CODE = ("give the Dataset a __getitems__(indices) that returns the whole batch, or use a BatchSampler "
                      "with batch_size=None")
PREDICTABLE_KEYS = frozenset({"loader.num_workers", "train.threads", "loader.prefetch_factor",
                              "loader.persistent_workers", "loader.pin_memory", "data.storage", "data.cache",
                              WHOLE_BATCHES})
# The risk of persistent workers on loaders re-created per fit (issue 14, item 5: predicted x1.13, ~3x slower).
RECREATED_LOADERS_NOTE = ("a new DataLoader is built per fit: persistent_workers would keep each one's workers alive "
                          "until garbage collection; build the loader once and reuse it")


@dataclass(frozen=True)
class Recommendation:
    """One change and the throughput the model predicts for it; summary.json's entry is ``to_json()``.

    ``change`` holds scenario keys as ``--set`` takes them (empty for a code change and
    for the honest negative); ``predicted_speedup`` is ``predicted_samples_per_s`` over
    the run's measured samples/s; ``model`` is the formula used, in the module
    docstring's symbols. Optional: ``note`` (what else to take out of the scenario),
    ``code_change`` (the code to write, for a change no setting makes) and, for a
    profiled script, ``script_text`` (the Python to change where it builds its loader).
    """

    change: dict[str, Any]
    predicted_samples_per_s: float | None
    predicted_speedup: float | None  # None: not predicted (a job's oversubscribed node, analysis.ranks)
    reason: str
    model: str
    note: str | None = None
    code_change: str | None = None
    script_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"change": dict(self.change), "predicted_samples_per_s": self.predicted_samples_per_s,
               "predicted_speedup": self.predicted_speedup, "reason": self.reason, "model": self.model}
        out.update({k: v for k, v in (("note", self.note), ("code_change", self.code_change),
                                      ("script_text", self.script_text)) if v is not None})
        return out


def recommend(run: Run, attribution: Attribution, verdict: Verdict) -> list[Recommendation]:
    """Recommendations ranked by predicted speed-up (see the module docstring for the model).

    Empty for a run with fewer than ``MIN_COUNTED_STEPS`` counted steps (nothing to predict from; the
    verdict, R0, says so). Otherwise never empty: without a change worth making, one entry with
    ``change = {}``, ``predicted_speedup = 1.0`` and the reason. A change equal to the run's current
    settings is dropped (``is_no_op``). Every recommendation of a failed or interrupted run carries the
    caveat of ``ended_early_caveat`` in its ``note``.
    """
    m = _Model(run, attribution)
    if m.current is None or len(m.counted) < MIN_COUNTED_STEPS:
        return []  # too few counted steps to predict from (the verdict, R0, says how many)
    recs = [r for r in (m.workers(), m.prefetch(), m.persistent(), m.batch_fetch(), m.cache_in_ram(),
                        m.on_device(), m.pin_memory(), m.fewer_threads(), *m.transform_changes()) if r is not None]
    current = m.current_settings()
    recs = [r for r in recs if (r.predicted_speedup or 0.0) >= MIN_GAIN and not is_no_op(r.change, current)]
    recs.sort(key=lambda r: -(r.predicted_speedup or 0.0))
    meta = run.meta if isinstance(run.meta, dict) else {}
    if meta.get("kind") == "script":
        recs = _for_script(recs, meta)
    recs = recs or [m.negative(verdict)]
    caveat = ended_early_caveat(run)
    if caveat:
        recs = [dataclasses.replace(r, note=f"{r.note}; {caveat}" if r.note else caveat) for r in recs]
    return recs


def predict_change(run: Run, attribution: Attribution, verdict: Verdict,
                   change: dict[str, Any]) -> Recommendation | None:
    """The model's prediction for ``change`` (recommendations' keys; ``{WHOLE_BATCHES: True}`` for the code
    change of taking whole batches), whether or not it would be recommended; the candidates of ``recommend``
    take their numbers from the same arithmetic (``_Model.predict``).

    None where the model cannot predict: fewer than ``MIN_COUNTED_STEPS`` counted steps; a key outside
    ``PREDICTABLE_KEYS``; a storage other than ``ram`` (decoded cache, from on-disk storage) or ``device``;
    warm <-> cold on the same storage; prefetch without workers or with another ``num_workers``; turning
    ``persistent_workers`` off; worker or thread changes without loading records (or on the device); a
    combination of keys the model does not compose (e.g. a storage change with threads). A change equal to
    the run's settings is predicted as the run measured. ``verdict`` is taken for the contract's shape.
    """
    del verdict  # the model reads the attribution; the verdict's class is not an input
    m = _Model(run, attribution)
    if m.current is None or len(m.counted) < MIN_COUNTED_STEPS:
        return None
    predicted = m.predict(change)
    if predicted is None:
        return None
    x, model = predicted
    code = bool(change.get(WHOLE_BATCHES))
    settings = {key: value for key, value in change.items() if key != WHOLE_BATCHES}
    what = "taking whole batches at once" if code else ", ".join(f"{k}={v!r}" for k, v in settings.items())
    return m._rec(settings, x, f"{what or 'no change'}: predicted {fmt.rate(x)} ({m._now()})", model,
                  code_change=WHOLE_BATCHES_CODE if code else None)


def is_no_op(change: dict[str, Any], current: dict[str, Any]) -> bool:
    """A change whose every key equals the run's current setting (``_Model.current_settings``): it would
    change nothing, so it is never recommended. An empty change (a code change, the negative) is not one;
    a key whose current value is unknown is a change."""
    return bool(change) and all(key in current and current[key] == value for key, value in change.items())


def ended_early_caveat(run: Run) -> str | None:
    """The caveat on every recommendation of a run that failed or was interrupted: it ended after N steps."""
    meta = run.meta if isinstance(run.meta, dict) else {}
    status = meta.get("status")
    if status not in ("failed", "interrupted"):
        return None
    total = len(run.steps)
    counted = len(counted_steps(run.steps))
    return (f"the run ended early ({status}) after {fmt.plural(total, 'step')} ({counted} counted): this advice "
            "rests on those steps only, and a full run may behave differently")


def _for_script(recs: list[Recommendation], meta: dict[str, Any]) -> list[Recommendation]:
    """A script's recommendations: only settings its code can change where it builds the training loader
    (placement is the script's design), each with the Python to write (``script_text``)."""
    loader: dict[str, Any] = next((d for d in meta.get("loaders") or [] if d.get("role") == "train"), {})
    out = []
    for rec in recs:
        change = rec.change
        if any(key.startswith("data.") for key in change):
            continue
        if not change:  # a code change (e.g. take whole batches): its own words apply to a script too
            out.append(rec)
            continue
        out.append(dataclasses.replace(rec, script_text=script_text(change, loader)))
    return out


class _Model:
    """The numbers the model needs, read once from the run and its attribution."""

    def __init__(self, run: Run, attr: Attribution) -> None:
        self.attr = attr
        meta = run.meta if isinstance(run.meta, dict) else {}
        settings = run.settings
        self.data, self.loader = settings.data, settings.loader
        self.device = settings.device
        steps = counted_steps(run.steps)
        self.all_steps = run.steps
        self.counted = steps
        n = float(steps["samples"].sum()) if len(steps) else 0.0
        total_s = float(steps["step_s"].sum()) if len(steps) else 0.0
        busy_s = float((steps["compute_s"] + steps["h2d_s"]).sum()) if len(steps) else 0.0
        self.samples, self.total_s = n, total_s
        self.h2d_s = float(steps["h2d_s"].sum()) if len(steps) else 0.0
        self.current = n / total_s if n and total_s > 0 else None
        self.ceiling = n / busy_s if n and busy_s > 0 else math.inf
        # Measured after the run with nothing else on the cores (runner.measure_compute_ceiling); the run's
        # own C is measured under its contention and only holds while that contention stays.
        alone = as_dict(meta.get("compute_ceiling")).get("samples_per_s")
        self.ceiling_alone = float(alone) if alone and math.isfinite(float(alone)) and alone > 0 else self.ceiling
        # Measured after the run in loops shaped like the changed ones (measure.what_if); None where absent.
        # every probe read at the run's pace where the run's own loop was measured again beside them (analysis.pace)
        recorded = as_dict(meta.get("what_ifs"))
        self.pace = probes_pace(recorded, settings.data.storage, self.current)
        self.what_ifs = paced(recorded, self.pace.factor) if self.pace is not None else recorded
        self.loop_ceiling = _probe_rate(self.what_ifs, "device_loop")
        self.loader_alone = _probe_rate(self.what_ifs, "loader_alone")
        ram = _probe_rate(self.what_ifs, "ram_loader")
        self.ram_loader = ram if ram is not None else (self.loader_alone if self.data.storage == "ram" else None)
        # C_free: compute with no loading beside it: the device-resident loop where measured, else C_alone
        # (the run's own C from a run with workers and no measurement alone: taken back to no stall, below).
        self.ceiling_free = self.loop_ceiling or self.ceiling_alone
        # the same loop at the threads a train.threads change goes to: 1, or the cores from a run at 1
        self.loop_other = _probe_rate(self.what_ifs, "device_loop_threads")
        other_threads = as_dict(self.what_ifs.get("device_loop_threads")).get("threads", 1)  # older entries: 1
        self.loop_other_threads = int(other_threads) if isinstance(other_threads, (int, float)) else 1
        self.loader_k = _workers_probes(self.what_ifs)  # k -> WorkerCosts (L_k, q_k, u_k, start-up) measured
        # (k, torch threads) -> the training loop fed by k workers, measured; the same over decoded samples in RAM
        self.trained = {(k, probe.threads): probe for name in ("train_workers", "train_threads")
                        for k, probe in _trained_probes(self.what_ifs, name).items()}
        self.trained_ram = {(k, probe.threads): probe
                            for k, probe in _trained_probes(self.what_ifs, "train_ram_workers").items()}
        self.batch_size = int(settings.loader.batch_size or 1)
        probe_threads = as_dict(self.what_ifs.get("device_loop")).get("threads")
        self.loop_threads = int(probe_threads) if isinstance(probe_threads, (int, float)) else None
        self.bytes_per_sample = _bytes_per_sample(run.loading)
        step, cpu, loading = attr.step, attr.cpu, attr.loading
        self.wait = step.data_wait_fraction or 0.0
        self.h2d = step.h2d_fraction or 0.0
        self.k = int(cpu.num_workers or 0)  # the attribution's: as set, else who made the batches
        # q from a run with workers: its own wall time taking a batch already waiting (module docstring)
        self.run_receive_s = receive_when_ready(steps) if self.k else None
        self.cores = float(cpu.cores_usable or 1)
        self.threads = float(cpu.torch_threads or self.cores)
        main = (cpu.main_cpu_mean_pct or 0.0) / 100
        self.train_cores = main * (1 - self.wait) if self.k == 0 else main
        self.free = max(self.cores - self.train_cores, 0.0)
        self.busy_over_usable = cpu.busy_over_usable_fraction
        self.cpu = cpu
        self.fetch: float | None = None
        self.prep: float | None = None
        self.collate: float | None = None
        if loading.absent is None and loading.fetch_per_sample_s is not None:
            self.fetch = loading.fetch_per_sample_s or 0.0
            self.prep = loading.prep_per_sample_s or 0.0
            self.collate = loading.collate_per_sample_s or 0.0
        self.loading = loading
        # A script's storage is unknown: no placement or batch-indexing advice is made for it.
        self.storage = self.data.storage or "script"  # RunSettings: None only for a script's own data
        self.cold = self.storage in ON_DISK and self.data.cache == "cold"
        self.throttled = self.data.throttle not in (None, False, "")
        self.storage_ceiling, self.storage_words = self._storage_ceiling()
        self.script = settings.kind == "script"  # advice is then Python in the script, not --set
        self.train_loaders = [d for d in meta.get("loaders") or [] if isinstance(d, dict) and d.get("role") == "train"]
        self.run = run
        if self.k and not self.loop_ceiling and not alone and self.current is not None \
                and math.isfinite(self.ceiling) and self._parts() is not None:
            self.ceiling_free = self._destalled(self._costs(self.k).cpu_s)

    @functools.cached_property
    def transforms(self) -> LoaderTransforms | None:
        """Issue 18: the training loader's measured transforms and decode calls (None where none were timed);
        read when a candidate asks (predict_change's resamples seldom do)."""
        return training_transforms(self.run)

    def _destalled(self, worker_cpu_s: float) -> float:
        """The run's own C (measured beside its workers, busy ``worker_cpu_s`` per sample) before their stall."""
        assert self.current is not None
        return self.ceiling * math.exp(STALL * _over(worker_cpu_s * self.current, self.threads, self.cores))

    def current_settings(self) -> dict[str, Any]:
        """The run's current value of each key a change can hold, where it is known (for ``is_no_op``)."""
        current: dict[str, Any] = {"loader.num_workers": self.k,
                                   "loader.persistent_workers": bool(self.loader.persistent_workers),
                                   "loader.pin_memory": bool(self.loader.pin_memory)}
        if self.cpu.torch_threads is not None:
            current["train.threads"] = int(self.cpu.torch_threads)
        factor = prefetch_factor(self.k, self.attr.prefetch.prefetch_factor or self.loader.prefetch_factor)
        if factor is not None:
            current["loader.prefetch_factor"] = factor
        if self.data.storage is not None:
            current["data.storage"] = self.data.storage
        if self.data.cache is not None:
            current["data.cache"] = self.data.cache
        return current

    # -- the throughput model ------------------------------------------------------------

    def _storage_ceiling(self) -> tuple[float, str]:
        if not self.cold:
            return math.inf, "no storage ceiling (the data is not read from a cold disk)"
        disk = self.attr.disk
        ceiling = disk.ceiling
        if ceiling is None or ceiling.absent is not None:
            why = ceiling.absent if ceiling is not None else disk.absent
            return math.inf, f"no storage ceiling ({why or 'no probe'})"
        limits = [v for v in (ceiling.random_4k_cold_reads_per_s,
                              (ceiling.sequential_cold_bytes_per_s or 0) / self.bytes_per_sample or None)
                  if v]
        if not limits:
            return math.inf, "no storage ceiling (the probe has no cold read rates)"
        return min(limits), f"storage ceiling {fmt.rate(min(limits))} (probe, cold reads)"

    def throughput(self, k: int, fetch: float, prep: float, collate: float, *,
                   ceiling: float | None = None, storage: float | None = None, cores: float | None = None,
                   threads: float | None = None) -> float:
        """X(k) in samples/s for per-sample fetch / prep / collate seconds (module docstring)."""
        if ceiling is not None:
            c = ceiling
        else:  # with no workers the loop makes batches between steps: nothing competes with compute
            c = self.ceiling_free if k == 0 or self.k == 0 else self.ceiling
        s = self.storage_ceiling if storage is None else storage
        p = fetch + prep + collate
        if k == 0:
            return min(1.0 / (p + 1.0 / c), s)
        io = self._io(fetch)  # waiting on storage needs no core
        cpu_s = p - io
        free = self.free if cores is None else cores
        w = self.worker_cores(k, free, threads)
        if w > free and self.train_cores > 0:
            c *= min(1.0, max(self.cores - w, 0.0) / self.train_cores)  # workers take cores from training
        per_sample = io + cpu_s * k / w if w > 0 else math.inf
        return min(c, k / per_sample if per_sample > 0 else math.inf, s)

    def worker_cores(self, k: int, free: float | None = None, threads: float | None = None) -> float:
        """W(k): the free cores, at least the workers' fair share of all cores among k + T threads."""
        free = self.free if free is None else free
        t = self.threads if threads is None else threads
        return min(k, max(free, k * self.cores / (k + t))) if k else 0.0

    def _parts(self) -> tuple[float, float, float] | None:
        if self.fetch is None or self.prep is None or self.collate is None:
            return None
        return self.fetch, self.prep, self.collate

    def _rec(self, change: dict[str, Any], predicted: float, reason: str, model: str,
             **extra: Any) -> Recommendation:
        assert self.current is not None  # recommend() returns before any candidate without counted steps
        return Recommendation(change, float(predicted), float(predicted / self.current), reason, model, **extra)

    def _now(self) -> str:
        return f"{fmt.rate(self.current)} now"

    def _ceiling_words(self) -> str:
        if self.ceiling_alone != self.ceiling:
            return (f"compute ceiling {fmt.rate(self.ceiling_alone)} alone, {fmt.significant(self.ceiling)} under this "
                    f"run's load")
        return f"compute ceiling {fmt.rate(self.ceiling)}"

    def _drop_worker_only(self, change: dict[str, Any]) -> list[str]:
        """Going to 0 workers: the settings that need workers (``loader_rules``) reset in ``change`` where
        ``--set`` can reset them (``persistent_workers = false``), else a note to remove them."""
        notes = []
        for key in worker_only_conflicts(0, self.loader.as_dict()):
            if key == "persistent_workers":
                change[f"loader.{key}"] = False
            else:
                notes.append(f"remove loader.{key} from the scenario: it needs workers")
        return notes

    # -- candidates ----------------------------------------------------------------------

    def workers(self) -> Recommendation | None:
        parts = self._parts()
        if parts is None or self.storage == "device":
            return None
        top = int(max(2 * self.cores, self.k + 2))
        predicted = {k: self._with_workers(k, parts) for k in range(top + 1)}
        best = max(x for x, _ in predicted.values())
        k = min(k for k, (x, _) in predicted.items() if x >= NEAR_BEST * best)
        threads = predicted[k][1]
        if k == self.k and threads is None:
            return None
        p = sum(parts)
        change: dict[str, Any] = {"loader.num_workers": k}
        if threads is not None:
            change["train.threads"] = threads
        extra: dict[str, Any] = {}
        if k == 0:
            notes = self._drop_worker_only(change)
            if notes:
                extra["note"] = "; ".join(notes)
        w = self.worker_cores(k) if threads is None else self.worker_cores(k, self.cores - threads, threads)
        how = (f"with {fmt.plural(k, 'worker')}, each makes a sample in {fmt.duration(p)} "
               f"({fmt.rate(1 / p)} per worker) on {w:.2f} of {self.cores:g} cores (the training process "
               f"uses {self.train_cores:.2f})" if k else
               f"the training process makes each sample in {fmt.duration(p)} between steps")
        if threads is not None:
            how += (f"; with {fmt.plural(threads, 'torch thread')}, leaving the workers {self.cores - threads:g} of "
                    f"{self.cores:g} cores (compute assumed to keep min(1, {threads}/{self.train_cores:.2f}) of "
                    "its speed)")
        x, model = self._predict_or_fail(change)
        return self._rec(change, x,
                         f"{how}; predicted min({self._ceiling_words()}, supply) = {fmt.rate(x)} "
                         f"({self._now()} with {fmt.plural(self.k, 'worker')}); {self.storage_words}",
                         model, **extra)

    def _with_workers(self, k: int, parts: tuple[float, float, float]) -> tuple[float, int | None]:
        """X(k), and the torch threads to set with it: never an oversubscribed k + T > N (threads N - k, >= 1)."""
        if k == 0 or k + self.threads <= self.cores or self.threads <= 1:
            threads = None
        else:
            threads = int(max(1, self.cores - k))
        return self._workers_x(k, threads, parts)[0], threads  # the model at every k, the current one included

    def _workers_x(self, k: int, threads: int | None, parts: tuple[float, float, float],
                   persistent: bool | None = None) -> tuple[float, str]:
        """X(k) (with ``threads`` torch threads where set); at k = 0 the batches the training process makes
        itself cost what the 0-worker loader measured alone after the run (``what_ifs.loader_alone``)."""
        trained = self._trained_x(k, threads, persistent)
        if trained is not None:
            return trained
        if k == 0:
            # A cold run made its own batches: its records measured p0 over a whole pass, whose pages warm as it
            # goes; the probe's short windows right after a drop read every page cold (module docstring, L0).
            measured = self.loader_alone is not None and not (self.cold and self.k == 0)
            p0 = (1.0 / self.loader_alone, 0.0, 0.0) if measured and self.loader_alone else parts
            c, words = self._compute_at(0, threads) if threads is not None else (None, "")
            return self.throughput(0, *p0, ceiling=c), (
                "X(0) = 1/(p0 + 1/C_free), p0 = 1/L0: the 0-worker loader measured alone after the run"
                if measured else "X(0) = 1/(p + 1/C_free), p from the run's loading records") + \
                self._c_free_words() + words
        if not (self.ceiling_free and math.isfinite(self.ceiling_free)):
            return self.throughput(k, *parts), "X(k) = min(C', k / (io + cpu·k/W(k)), S) (no compute ceiling)"
        return self._workers_fixed_point(k, threads, persistent)

    def _trained_x(self, k: int, threads: int | None, persistent: bool | None, *,
                   ram: bool = False) -> tuple[float, str] | None:
        """X(k) where the training loop fed by ``k`` workers was measured after the run at these threads
        (``what_ifs.train_workers``, or ``train_ram_workers`` over decoded samples in RAM: module docstring,
        "k workers, trained"): its samples/s, each counted pass start's worker start-up added; None where not
        measured."""
        probe = (self.trained_ram if ram else self.trained).get((k, threads if threads is not None else self.threads))
        if probe is None:
            return None
        x = probe.samples_per_s
        starts = self._pass_starts_with(bool(self.loader.persistent_workers if persistent is None else persistent))
        if k and starts and self.samples:
            x = self.samples / (self.samples / x + starts * probe.startup_s)
        name = probe.source + (": over decoded samples in RAM" if ram else "")
        if not k:
            return x, f"X(0): the training loop making its own batches, measured after the run (what_ifs.{name})"
        return x, (f"X_k: the training loop fed by k workers, measured after the run (what_ifs.{name}), "
                   "each counted pass start's worker start-up added")

    def _costs(self, k: int) -> WorkerCosts:
        """L_k, q_k, u_k and the start-up at ``k`` workers: the loader_workers probe's where it measured ``k``,
        else estimated from the run's production per sample (module docstring, "k workers, estimated")."""
        if k in self.loader_k:
            return self.loader_k[k]
        parts = self._parts()
        assert parts is not None  # the callers predict workers from the loading records
        fetch, prep, collate = parts
        io = self._io(fetch)
        tensor_bytes = float(SAMPLE_BYTES)  # the batch's tensors (a script's: assumed the same)
        send = SEND_S_PER_BATCH / self.batch_size + SEND_S_PER_BYTE * tensor_bytes if self.k == 0 else 0.0
        cpu_s = fetch + prep + collate - io + send
        receive = RECEIVE_S_PER_BATCH / self.batch_size + RECEIVE_S_PER_BYTE * tensor_bytes
        rate = k / (io + cpu_s) if io + cpu_s > 0 else math.inf
        return WorkerCosts(rate, receive, cpu_s, STARTUP_S_PER_WORKER * k, measured=False)

    def _ram_costs(self, k: int, p_ram: float) -> WorkerCosts:
        """What ``k`` workers cost making decoded samples from RAM (``p_ram`` s a sample in a 0-worker loader):
        each sends its batches too; the training process receives them as the probed (else estimated) ``q_k``
        (the same batches' bytes), and the workers start as probed (else estimated)."""
        send = SEND_S_PER_BATCH / self.batch_size + SEND_S_PER_BYTE * float(SAMPLE_BYTES)
        probed = self.loader_k.get(k)
        receive = probed.receive_s if probed is not None else \
            RECEIVE_S_PER_BATCH / self.batch_size + RECEIVE_S_PER_BYTE * float(SAMPLE_BYTES)
        startup = probed.startup_s if probed is not None else STARTUP_S_PER_WORKER * k
        u = p_ram + send
        return WorkerCosts(k / u, receive, u, startup, measured=False)

    def _run_workers_costs(self) -> WorkerCosts:
        """What the run's own workers cost: the probe of the nearest k (the run's own k is never probed), else
        estimated from the run's loading records."""
        if self.loader_k:
            return self.loader_k[min(self.loader_k, key=lambda n: (abs(n - self.k), n))]
        return self._costs(self.k)

    def _io(self, fetch: float) -> float:
        """The part of fetch that waits on storage, not a core: a script's fetch is measured as exactly that
        (off-CPU time); a scenario's where the data is read cold or throttled."""
        return fetch if self.storage == "script" or ((self.cold or self.throttled)
                                                     and self.storage in ON_DISK + ("ram",)) else 0.0

    @functools.cached_property
    def _pass_firsts(self) -> pd.DataFrame | None:
        """Each pass's first step where it is counted (not warm-up); None without epochs to tell passes by."""
        steps = self.all_steps
        if steps.empty or "epoch" not in steps:
            return None
        firsts = steps.loc[steps.groupby("epoch")["step"].idxmin()]
        return firsts[~firsts["warmup"].astype(bool)]

    def _pass_starts_with(self, persistent: bool) -> int:
        """How many counted steps begin a pass that starts workers: every pass's first, or with persistent
        workers a new loader's first pass only."""
        firsts = self._pass_firsts
        if firsts is None:
            return 0
        return int(firsts["epoch"].isin(self._first_pass_epochs()).sum()) if persistent else len(firsts)

    def _workers_fixed_point(self, k: int, threads: int | None, persistent: bool | None = None, *,
                             costs: WorkerCosts | None = None, storage: float | None = None,
                             source: str | None = None) -> tuple[float, str]:
        """X(k) (module docstring, "k workers, measured" and "estimated"): the fixed point of
        X = min(L_k, W/u_k, S, 1/(1/C_k(u_k·X) + q_k)), solved by bisection (the right side falls as X
        grows, so there is one), then each counted pass start's worker start-up added. ``costs``, ``storage``
        (S) and ``source`` (their words) for another data placement (decoded samples in RAM: ``_ram_x``)."""
        costs = self._costs(k) if costs is None else costs
        storage_ceiling = self.storage_ceiling if storage is None else storage
        rate, worker_cpu = costs.samples_per_s, costs.cpu_s
        receive = costs.receive_s if self.run_receive_s is None else self.run_receive_s
        t = float(threads) if threads is not None else self.threads
        c0, words = self._compute_at(k, threads) if threads is not None else (self.ceiling_free, "")
        if threads is None and self.k > 0 and math.isfinite(self.ceiling) and self.current is not None:
            # the run's own C, measured under its workers' stall: C_free before that stall
            near = self._run_workers_costs()
            c0 = self._destalled(near.cpu_s)
            words = ("; C_free = C·exp(STALL·over) at the run's own workers (u of the nearest k probed)"
                     if near.measured else "; C_free = C·exp(STALL·over) at the run's own workers (u estimated)")
        def rate_at(x: float) -> float:
            """The lower of what the workers supply and what the training process takes, at rate x."""
            compute = workers_compute(c0, worker_cpu * x, t, self.cores)
            w = worker_share(k, t, self.cores, x / compute)
            supply = min(rate, w / worker_cpu if worker_cpu > 0 else math.inf, storage_ceiling)
            return min(supply, 1.0 / (1.0 / compute + receive))

        # rate_at falls as x grows (more compute time, more stall): one fixed point, found by bisection, at most
        # rate_at(0) (the training process never computing: the workers' whole cores, compute with no stall)
        lo, hi = 0.0, rate_at(0.0)
        if rate_at(hi) >= hi:
            x = hi
        else:
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if rate_at(mid) >= mid else (lo, mid)
            x = lo
        starts = self._pass_starts_with(bool(self.loader.persistent_workers if persistent is None else persistent))
        if starts and x > 0 and self.samples:
            x = self.samples / (self.samples / x + starts * costs.startup_s)
        source = source or ("the k-worker loader measured alone after the run (what_ifs.loader_workers: L_k, "
                  "receive q_k, workers' CPU u_k per sample and their start-up)" if costs.measured else
                  f"L_k, q_k, u_k estimated: u = the run's CPU per sample{' + sending a batch' if self.k == 0 else ''}"
                  f", q = receiving one ({fmt.duration(costs.receive_s)} a sample), start-up "
                  f"{fmt.duration(STARTUP_S_PER_WORKER)} a worker (assumed)")
        if self.run_receive_s is not None:
            source += (f"; q = the run's own wall time taking a batch that was already waiting "
                       f"({fmt.duration(self.run_receive_s)} a sample)")
        return x, ("X(k) = min(L_k, W/u_k, S, 1/(1/C_k + q_k)), W = k or k·N/(k+T) while computing and min(k, N) "
                   "while waiting, C_k = C_free/exp(STALL·over), "
                   f"over = min(max(T + u_k·X − N, 0), u_k·X), then n/(n/X + {starts} pass starts × start-up): "
                   + source + self._c_free_words() + words)

    def _compute_at(self, k: int, threads: int) -> tuple[float, str]:
        """C' with ``threads`` torch threads and ``k`` workers, and its words for ``model``.

        Measured (``what_ifs.device_loop`` at T threads and ``device_loop_threads`` at the other number: 1, or
        the cores from a run at 1; in between linear in the threads): from a run without workers, or to none,
        compute runs as the loop alone at ``threads``; from a run with workers, the run's compute
        (``_run_compute``: its C taken back from the workers' stall by their busy cores) scaled by the loop's
        measured ratio C_loop(threads)/C_loop(T), even where the change leaves the workers a core of their own
        (module docstring, C_loop(t)). Without the probes: C·min(1, threads/m).
        """
        at = self._loop_at(threads)
        if at is None or not self.loop_ceiling:
            base = self.ceiling_free if k == 0 else None
            return self._ceiling_with(threads, base), ", C' = C·min(1, threads/m) (assumed)"
        if k == 0 or self.k == 0:
            return at, ", C' = C_loop(threads): the device-resident loop at that many threads, measured"
        return self._run_compute() * at / self.loop_ceiling, (
            ", C' = C^(1−b)·C_free^b·C_loop(threads)/C_loop(T), b = the run's workers' busy cores (at most 1), "
            "measured")

    def _run_compute(self) -> float:
        """The run's compute to carry to other threads: its own C (measured beside its workers) where they were
        idle, C before their modelled stall where they kept a core busy, in between geometrically by their busy
        cores ``b = u·X`` (at most 1; u of the nearest k probed, else estimated): module docstring, C_loop(t)."""
        if self.current is None or not math.isfinite(self.ceiling):
            return self.ceiling
        near = self._run_workers_costs()
        busy = min(max(near.cpu_s * self.current, 0.0), 1.0)
        return self.ceiling ** (1 - busy) * self._destalled(near.cpu_s) ** busy

    def _loop_at(self, threads: int) -> float | None:
        """The device-resident loop's samples/s at ``threads``: linear between the two probes (the run's T and
        the other: 1, or the cores from a run at 1), held at the nearer one beyond them."""
        if self.loop_threads is None or self.loop_ceiling is None or self.loop_other is None \
                or self.loop_other_threads == self.loop_threads:
            return None
        (t_a, c_a), (t_b, c_b) = sorted([(self.loop_threads, self.loop_ceiling),
                                         (self.loop_other_threads, self.loop_other)])
        t = min(max(threads, t_a), t_b)
        return c_a + (c_b - c_a) * (t - t_a) / (t_b - t_a)

    def _ceiling_with(self, threads: int, base: float | None = None) -> float:
        """C with fewer torch threads: in proportion to the cores the training process really used, at most C."""
        c = self.ceiling if base is None else base
        return c * min(1.0, threads / self.train_cores) if self.train_cores > 0 else c

    # -- any change's prediction (predict_change; every candidate's number comes from here) ------

    def predict(self, change: dict[str, Any]) -> tuple[float, str] | None:
        """(samples/s, the formula in the module docstring's symbols) for ``change``; None where not modelled.

        Without the what-if probes (a script's run, a run from before them, a probe that failed) the model
        says it is the analytical one, and why."""
        predicted = self._predict(change)
        if predicted is not None and self.pace is not None and "what_ifs." in predicted[1]:
            predicted = predicted[0], f"{predicted[1]}; {self.pace.words()}"
        if predicted is None or self.what_ifs.get("device_loop") is not None or "what_ifs." in predicted[1]:
            return predicted
        absent = self.what_ifs.get("absent")
        why = (str(absent) if absent else
               "the what-if segments of the script's own loop did not measure this setting" if self.script else
               "the run has no what_ifs (recorded before them)")
        return predicted[0], f"{predicted[1]} [analytical, no what-if probe: {why}]"

    def _predict(self, change: dict[str, Any]) -> tuple[float, str] | None:
        if not set(change) <= PREDICTABLE_KEYS:
            return None
        parts = self._parts()
        storage = change.get("data.storage", self.data.storage)
        k = int(change.get("loader.num_workers", self.k))
        threads = change.get("train.threads")
        threads = None if threads is None or (threads == self.cpu.torch_threads) else int(threads)
        others = set(change) - {"data.storage", "data.cache", "loader.num_workers", "loader.persistent_workers"}
        if change.get(WHOLE_BATCHES):
            return self._batch_x() if set(change) == {WHOLE_BATCHES} else None
        if storage == "device" and self.storage != "device":
            return self._device_x() if not others else None
        if storage != self.data.storage:
            return self._ram_x(k) if storage == "ram" and self.storage in ON_DISK and threads is None \
                and not others else None
        if change.get("data.cache", self.data.cache) != self.data.cache:
            return None  # warm <-> cold on the same storage: not modelled
        if "loader.pin_memory" in change:
            if len(change) > 1 or not change["loader.pin_memory"] or self.current is None:
                return None
            if not self.device.startswith("cuda") or pins_memory(self.loader.pin_memory, self.device):
                return self.current, "the run as measured: pinned memory changes nothing here"
            return self.samples / max(self.total_s - self.h2d_s / 2, 1e-12), "n / (counted time − h2d/2) (assumed)"
        if "loader.persistent_workers" in change and k == self.k and len(change) == 1:
            if not change["loader.persistent_workers"] or self.loader.persistent_workers:
                return (self.current, "the run as measured") if change["loader.persistent_workers"] \
                    == bool(self.loader.persistent_workers) and self.current is not None else None
            return self._persistent_x()
        if "loader.prefetch_factor" in change:
            if not k or k != self.k or len(change) > 1:
                return None
            return self._prefetch_x()
        if parts is None or self.storage == "device":
            return None
        if k == self.k and threads is None:
            return (self.current, "the run as measured") if self.current is not None else None
        return self._workers_x(k, threads, parts, change.get("loader.persistent_workers"))

    def _predict_or_fail(self, change: dict[str, Any]) -> tuple[float, str]:
        predicted = self.predict(change)
        assert predicted is not None, change  # a candidate only proposes changes the model predicts
        return predicted

    def _batch_measured(self) -> bool:
        return self.k == 0 and self.loop_ceiling is not None

    def _batch_x(self) -> tuple[float, str] | None:
        """Whole batches at once: with 0 workers the loop indexing a whole batch at once is the device-resident
        loop (measured), plus the run's host -> device copy; with workers the assumption of the docstring."""
        parts = self._parts()
        if self._batch_measured() and self.samples:
            assert self.loop_ceiling is not None
            per_sample_h2d = self.h2d_s / self.samples
            return (1.0 / (1.0 / self.loop_ceiling + per_sample_h2d),
                    "1/(1/C_loop + h2d per sample): the loop taking whole batches by one index, measured after "
                    "the run (what_ifs.device_loop), plus the run's host → device copy")
        if parts is None:
            return None
        fetch, prep, collate = parts
        return (self.throughput(self.k, BATCH_FETCH_KEEPS_FETCH * fetch, prep, BATCH_FETCH_KEEPS_COLLATE * collate),
                "X(k) with fetch × 0.1, collate × 0.2 (assumed)")

    def _ram_x(self, k: int) -> tuple[float, str] | None:
        """Decoded samples cached in RAM: production per sample as the 0-worker loader over them measured after
        the run (what_ifs.ram_loader), else the run's own with fetch (and a plain decode) removed."""
        trained = self._trained_x(k, None, None, ram=True) if k else None
        if trained is not None:
            return trained
        if self.ram_loader:
            p = 1.0 / self.ram_loader
            words = ", p_ram = 1/R: decoded samples in RAM through a 0-worker loader, measured after the run"
            if k == 0:
                return (self.throughput(0, 0.0, p, 0.0, storage=math.inf),
                        "X(0) = 1/(p_ram + 1/C_free)" + words + self._c_free_words())
            if self.ceiling_free and math.isfinite(self.ceiling_free):
                return self._workers_fixed_point(k, None, costs=self._ram_costs(k, p), storage=math.inf,
                                                 source="u_k = p_ram + sending a batch, L_k = k/u_k" + words)
            return (self.throughput(k, 0.0, p, 0.0, storage=math.inf),
                    "X(k) = min(C', k/(p_ram·k/W(k)))" + words)
        parts = self._parts()
        if parts is None:
            return None
        _, prep, collate = parts
        decode = self.transforms.decode if self.transforms is not None else None
        if decode is not None:  # the decode measured (transforms.csv): only it goes, the transforms stay
            return (self.throughput(k, 0.0, max(prep - decode.per_sample_s, 0.0), collate, storage=math.inf),
                    f"X(k) with fetch = 0 and prep − {fmt.duration(decode.per_sample_s)} (the decode measured)")
        keep_prep = prep if (self.storage != "images" or self.data.transform == "augment") else 0.0
        return (self.throughput(k, 0.0, keep_prep, collate, storage=math.inf),
                "X(k) with fetch = 0" + (" and prep = 0 (decode)" if not keep_prep and prep else "") + " (assumed)")

    def _device_x(self) -> tuple[float, str] | None:
        if self.loop_ceiling:
            return self.loop_ceiling, ("C_loop: the device-resident training loop (shuffled index into on-device "
                                       "tensors) measured after the run (what_ifs.device_loop)")
        if not math.isfinite(self.ceiling_alone):
            return None
        return self.ceiling_alone, ("C_alone: training steps on one batch on the device after the run, nothing else "
                                    "running (else C = n / Σ(compute + h2d)); no device-loop probe")

    def _prefetch_x(self) -> tuple[float, str] | None:
        """A deeper queue absorbs bursts, not a supply short of the loop nor a pass's start: it saves the waits
        beyond the median wait of the steps that do not begin a pass (``Σ max(wait − median, 0)``), and gives at
        most what the workers make busy all the time (the run's samples/s over their busy share, measured)."""
        if self.current is None:
            return None
        steps = self.counted
        if "epoch" in steps and len(steps):
            steps = steps[steps["step"] != steps.groupby("epoch")["step"].transform("min")]
        waits = steps["data_wait_s"].astype(float)
        saved = float((waits - float(waits.median())).clip(lower=0.0).sum()) if len(waits) else 0.0
        busy = self.loading.worker_busy_mean_fraction
        cap = self.current / min(busy, 1.0) if busy and busy > 0 else math.inf
        x = max(self.current, min(self.samples / max(self.total_s - saved, 1e-12), cap))
        return x, ("min(n / (counted time − Σ max(wait − median wait, 0)), X / busy): the bursts' waits saved, "
                   "at most the workers' output busy all the time"
                   + (f" (busy {fmt.pct(min(busy, 1.0))})" if busy else " (their busy share not measured)"))

    def _c_free_words(self) -> str:
        if self.loop_ceiling:
            return "; C_free = C_loop: the device-resident training loop measured after the run"
        return "; C_free = C_alone: steps on one batch after the run (no what-if probe)"

    def prefetch(self) -> Recommendation | None:
        pre, parts = self.attr.prefetch, self._parts()
        if not self.k or parts is None or pre.absent is not None:
            return None
        empty, busy = pre.empty_step_fraction, self.loading.worker_busy_mean_fraction
        if empty is None or empty < BURSTY_EMPTY_FRACTION or (busy is not None and busy >= WORKERS_BUSY):
            return None
        factor = prefetch_factor(self.k, pre.prefetch_factor) or 1
        x, model = self._predict_or_fail({"loader.prefetch_factor": 2 * factor})
        return self._rec({"loader.prefetch_factor": 2 * factor}, x,
                         f"supply is bursty: {fmt.pct(empty)} of steps found the queue empty while the workers "
                         f"were busy only {fmt.pct(busy or 0)} of the time; a deeper queue "
                         f"({self.k} × {2 * factor} batches) lets them run ahead: predicted {fmt.rate(x)} with "
                         f"the bursts' waits saved ({self._now()})", model)

    def persistent(self) -> Recommendation | None:
        """Persistent workers save the start of a *re-iterated* loader's pass (its workers are kept), never a new
        loader's first pass; loaders re-created per fit get the risk instead, with reuse as the code change."""
        if not self.k or self.loader.persistent_workers:
            return None
        if self.cold and self.storage == "memmap":
            return None  # refused by the scenario: mapped pages cannot be dropped
        firsts = self._pass_firsts
        if firsts is None or firsts.empty:
            return None
        median_wait = float(self.counted["data_wait_s"].median())
        median_step = float(self.counted["step_s"].median())
        again, new = self._pass_starts(firsts)
        slow = self._slow_starts(again, median_wait, median_step)
        if slow is not None:
            saved, _ = slow
            x, model = self._predict_or_fail({"loader.persistent_workers": True})
            return self._rec({"loader.persistent_workers": True}, x,
                             f"the first step of {fmt.plural(len(again), 'epoch')} waited "
                             f"{fmt.duration(float(again['data_wait_s'].mean()))} on average against a median wait "
                             f"of {fmt.duration(median_wait)} (median step {fmt.duration(median_step)}): workers are "
                             f"started anew every time the loader is iterated again; keeping them saves "
                             f"{fmt.duration(saved)} of {fmt.duration(self.total_s)}: predicted {fmt.rate(x)} "
                             f"({self._now()})", model)
        recreated = self._recreated()
        slow = self._slow_starts(new, median_wait, median_step) if recreated else None
        if slow is None or recreated is None:
            return None
        saved, x = slow
        name, count = recreated
        return self._rec({}, x,
                         f"{count} DataLoaders named {name} were built, each iterated once (a new DataLoader per "
                         f"fit); the first step of each new one's pass waited "
                         f"{fmt.duration(float(new['data_wait_s'].mean()))} on average against a median wait of "
                         f"{fmt.duration(median_wait)}, starting its workers: one loader built once and iterated "
                         f"again, its workers kept, saves {fmt.duration(saved)} of {fmt.duration(self.total_s)}: "
                         f"predicted {fmt.rate(x)} ({self._now()})",
                         "n / (counted time − excess wait of new loaders' first steps)",
                         code_change="build the DataLoader once, outside fit, and iterate that one loader in every "
                                     "fit (with persistent_workers=True it keeps its workers between passes)",
                         note=RECREATED_LOADERS_NOTE)

    def _pass_starts(self, firsts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The counted first steps of re-iterated passes, and of new loaders' first passes (not the first's)."""
        first_passes = self._first_pass_epochs()
        return (firsts[~firsts["epoch"].isin(first_passes)],
                firsts[firsts["epoch"].isin(first_passes - {0})])  # the first loader's first pass: nothing to save

    def _persistent_x(self) -> tuple[float, str] | None:
        """Persistent workers: the run without the excess wait of re-iterated passes' first steps (none: the
        run as measured); None without workers or epochs to tell passes by."""
        firsts = self._pass_firsts
        if not self.k or firsts is None:
            return None
        assert self.current is not None
        model = "n / (counted time − excess wait of re-iterated passes' first steps)"
        if firsts.empty:
            return self.current, model + ": no counted pass start, nothing to save"
        slow = self._slow_starts(self._pass_starts(firsts)[0], float(self.counted["data_wait_s"].median()),
                                 float(self.counted["step_s"].median()), threshold=False)
        return (slow[1], model) if slow is not None else (self.current, model + ": none waited longer")

    def _slow_starts(self, firsts: pd.DataFrame, median_wait: float,
                     median_step: float, threshold: bool = True) -> tuple[float, float] | None:
        """(saved s, predicted samples/s) when these first steps waited SLOW_EPOCH_START_STEPS median steps
        longer than the median wait, on average (any excess at all without ``threshold``); else None."""
        if firsts.empty:
            return None
        excess = (firsts["data_wait_s"].astype(float) - median_wait).clip(lower=0.0)
        if float(excess.mean()) <= (SLOW_EPOCH_START_STEPS * median_step if threshold else 0.0):
            return None
        saved = float(excess.sum())
        return saved, self.samples / max(self.total_s - saved, 1e-12)

    def _first_pass_epochs(self) -> set[int]:
        """The epochs (passes over the training loaders, in order) that are a loader's first pass.

        A scenario iterates one loader: epoch 0. A script's training loaders, in the order they were built,
        take their passes one after another (run.json's ``loaders``: ``passes`` each), so loader i's first
        pass is the sum of the passes before it. Loaders iterated in turn are not told apart (none seen)."""
        if not self.train_loaders:
            return {0}
        out, epoch = set(), 0
        for loader in sorted(self.train_loaders, key=lambda d: d.get("number") or 0):
            out.add(epoch)
            epoch += max(int(loader.get("passes") or 1), 1)
        return out

    def _recreated(self) -> tuple[str, int] | None:
        """(name, count) of training loaders built again with the same name and settings, else None."""
        groups: dict[tuple, int] = {}
        for d in self.train_loaders:
            key = (d.get("name"), d.get("dataset"), d.get("batch_size"), d.get("num_workers"))
            groups[key] = groups.get(key, 0) + 1
        key, count = max(groups.items(), key=lambda kv: kv[1], default=((None,), 0))
        return (str(key[0] or "the training loader"), count) if count >= 2 else None

    def batch_fetch(self) -> Recommendation | None:
        parts = self._parts()
        if parts is None or self.storage != "ram" or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        fetch, prep, collate = parts
        p = fetch + prep + collate
        if p <= 0 or (fetch + collate) / p < SHARE_DOMINATES:
            return None
        x, model = self._predict_or_fail({WHOLE_BATCHES: True})
        how = ("measured: the loop taking whole batches by one index, after the run" if self._batch_measured() else
               "assumed: 90% of fetch and 80% of collate go away")
        return self._rec({}, x,
                         f"per-sample indexing and collate are {fmt.pct((fetch + collate) / p)} of making a batch "
                         f"({fmt.duration(fetch)} + {fmt.duration(collate)} per sample); taking whole batches at once "
                         f"({how}) predicts {fmt.rate(x)} ({self._now()})", model, code_change=WHOLE_BATCHES_CODE)

    def cache_in_ram(self) -> Recommendation | None:
        parts = self._parts()
        if parts is None or self.storage not in ON_DISK:
            return None
        fetch, prep, collate = parts
        p = fetch + prep + collate
        measured = decode_share(self.transforms) if self.transforms is not None else None
        if measured is not None:  # the decode calls timed (transforms.csv) decide, not prep as a whole
            decode = measured >= SHARE_DOMINATES
        else:
            decode = self.storage == "images" and p > 0 and prep / p >= SHARE_DOMINATES
        stored = (self.cold or self.throttled or self.storage in ("files",)) and p > 0 and fetch / p >= SHARE_DOMINATES
        if not (decode or stored) or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        change: dict[str, Any] = {"data.storage": "ram"}
        if self.data.cache == "cold":
            change["data.cache"] = "warm"
        x, model = self._predict_or_fail(change)
        how = "cold" if self.cold else "throttled" if self.throttled else "one file per sample"
        if decode:  # the measured decode's share where it was timed
            what = (decode_words(self.transforms) if self.transforms is not None and measured is not None else None) \
                or f"decoding is {fmt.pct(prep / p)} of making a batch ({fmt.duration(prep)} per sample)"
        else:
            what = (f"fetching from {self.storage} ({how}) is {fmt.pct(fetch / p)} of making a batch "
                    f"({fmt.duration(fetch)} per sample)")
        extra = {}
        if self.storage == "images":
            extra["note"] = "remove data.format / data.quality from the scenario: they apply to images only"
        if self.throttled:
            extra["note"] = "remove data.throttle from the scenario (slow storage is what the cache avoids)"
        return self._rec(change, x,
                         f"{what}; with decoded samples cached in RAM fetch{' and decode' if decode else ''} go "
                         f"away: predicted {fmt.rate(x)} ({self._now()}, {self._ceiling_words()})", model, **extra)

    def transform_changes(self) -> list[Recommendation]:
        """Issue 18's changes to the training loader's transforms and decode (``transform_advice``), each
        predicted from the measured per-sample costs it saves (``saved_x``). A scenario's images on disk get the
        decoded cache in RAM as ``data.storage = "ram"`` (``cache_in_ram``), not as a code change."""
        if self.wait < COMPUTE_BOUND_FRACTION:
            return []
        out = []
        for saving in prep_savings(self.transforms):
            if saving.kind == DECODE_IN_RAM and not self.script and self.storage in ON_DISK:
                continue
            predicted = self.saved_x(saving)
            if predicted is None:
                continue
            x, model = predicted
            note = saving.note
            if not self.script:
                note = f"{note}; a code change: no scenario setting expresses it, so --verify cannot re-run it"
            out.append(self._rec({}, x, f"{saving.why}: predicted {fmt.rate(x)} ({self._now()}), from the measured "
                                        "per-transform costs", model, code_change=saving.code_change, note=note))
        return out

    def saved_x(self, saving: PrepSaving) -> tuple[float, str] | None:
        """The run's samples/s with ``saving``'s seconds per sample taken out of prep (and fetch): the measured
        rate times the model's X(k) after over X(k) before (``throughput``: the supply model at the run's
        workers, at 0 workers 1/(p + 1/C_free)), so only the change's own effect moves the measured rate. None
        without loading records."""
        parts = self._parts()
        if parts is None or self.current is None:
            return None
        fetch, prep, collate = parts
        prep_saved, fetch_saved = min(saving.prep_saved_s, prep), min(saving.fetch_saved_s, fetch)
        before = self.throughput(self.k, fetch, prep, collate)
        after = self.throughput(self.k, fetch - fetch_saved, prep - prep_saved, collate,
                                storage=math.inf if fetch_saved else None)
        if not (before > 0 and math.isfinite(before) and math.isfinite(after)):
            return None
        fetched = f" and fetch − {fmt.duration(fetch_saved)}" if fetch_saved else ""
        model = (f"X_now · X(k; prep − {fmt.duration(prep_saved)}{fetched}) / X(k; prep), X(k) = min(C', "
                 f"k/(io + cpu·k/W(k)), S) at k = {self.k} (X(0) = 1/(p + 1/C_free)); the saving from the measured "
                 "per-transform and decode costs (transforms.csv)")
        if saving.assumed:
            model += f"; {saving.assumed}"
        return self.current * after / before, model

    def on_device(self) -> Recommendation | None:
        n = self.data.samples
        if self.storage == "device" or not n or n * SAMPLE_BYTES > DEVICE_DATA_MAX_BYTES or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        if not math.isfinite(self.ceiling):
            return None
        change: dict[str, Any] = {"data.storage": "device"}
        if self.k:
            change["loader.num_workers"] = 0
        notes = self._drop_worker_only(change)
        if self.storage == "images":
            notes.append("remove data.format / data.quality from the scenario: they apply to images only")
        if self.throttled:
            notes.append("remove data.throttle from the scenario: it does not apply to on-device data")
        extra = {"note": "; ".join(notes)} if notes else {}
        if self.data.cache == "cold":
            change["data.cache"] = "warm"
        x, model = self._predict_or_fail(change)
        basis = "the device-resident loop measured after the run" if self.loop_ceiling else \
            f"the {self._ceiling_words()}"
        return self._rec(change, x,
                         f"the data set is small ({fmt.byte_size(n * SAMPLE_BYTES)}): held on the device, batches are "
                         f"taken by index with no loading at all — predicted {fmt.rate(x)}, {basis} "
                         f"({self._now()}, {fmt.pct(self.wait)} waiting for data)", model, **extra)

    def pin_memory(self) -> Recommendation | None:
        if not self.device.startswith("cuda") or pins_memory(self.loader.pin_memory, self.device) \
                or self.h2d < PIN_MEMORY_H2D:
            return None
        x, model = self._predict_or_fail({"loader.pin_memory": True})
        return self._rec({"loader.pin_memory": True}, x,
                         f"host → device copies take {fmt.pct(self.h2d)} of step time; assuming pinned memory "
                         f"halves them: predicted {fmt.rate(x)} ({self._now()})", model)

    def fewer_threads(self) -> Recommendation | None:
        parts = self._parts()
        if parts is None or not self.k or not self.cpu.oversubscribed or self.wait < COMPUTE_BOUND_FRACTION:
            return None
        threads = int(max(1, self.cores - self.k))
        if threads >= self.threads:
            return None
        c = self._ceiling_with(threads)
        x, model = self._predict_or_fail({"train.threads": threads})
        return self._rec({"train.threads": threads}, x,
                         f"{fmt.plural(self.k, 'worker')} + {fmt.plural(self.threads, 'torch thread')} want more than "
                         f"{fmt.plural(self.cores, 'core')}; with {fmt.plural(threads, 'torch thread')} the workers get "
                         f"{fmt.plural(self.cores - threads, 'core')} and compute "
                         f"keeps {fmt.rate(c)} (assumed: in proportion to the {self.train_cores:.2f} cores the "
                         f"training process used, at most C): predicted {fmt.rate(x)} ({self._now()})", model)

    # -- the honest negative -------------------------------------------------------------

    def negative(self, verdict: Verdict) -> Recommendation:
        assert self.current is not None  # recommend() answers a run without counted steps itself
        busy = self.busy_over_usable
        if verdict.klass == "compute":
            threads = ""
            if self.cpu.oversubscribed:
                fewer = int(max(1, self.cores - self.k))
                how = (f"try torch.set_num_threads({fewer}) in the script" if self.script else
                       f"measure --set train.threads={fewer}")
                threads = (f"; but {fmt.plural(self.k, 'worker')} + {fmt.plural(self.threads, 'torch thread')} "
                           f"oversubscribe the {self.cores:g} cores, which can slow compute more than this model "
                           f"predicts: {how}")
            # From the unrounded numbers; a headroom that rounds to 0% is no gain to state.
            headroom = fmt.change_pct(self.ceiling, self.current)
            above = (f"is the same as the {self._now()}" if headroom == "the same" else
                     f"is {headroom} the {self._now()}")
            return _negative(self.current,
                             f"the run is compute-bound: only {fmt.pct(self.wait, 1)} of step time waits for data; "
                             f"the {self._ceiling_words()} {above}, so a faster input pipeline cannot gain more — "
                             f"make the model's step cheaper instead{threads}", "C = n / Σ(compute + h2d)")
        if busy is not None and busy >= SATURATED_FRACTION:
            return _negative(self.current,
                             f"more workers will not help: all {self.cores:g} cores are saturated "
                             f"({fmt.pct(busy)} busy: training process and workers)",
                             "W(k) = free cores, none left")
        return _negative(self.current,
                         f"no change in the model predicts a gain of {fmt.pct(MIN_GAIN - 1, 0)} or more "
                         f"({self._now()}, {self._ceiling_words()}; {self.storage_words})", "all candidates")


def _negative(current: float | None, reason: str, model: str) -> Recommendation:
    return Recommendation({}, current, 1.0, reason, model)


def workers_compute(c_free: float, busy: float, threads: float, cores: float) -> float:
    """C_k: compute beside workers busy ``busy`` cores (module docstring, "k workers, measured"): ``c_free``
    while the torch threads and the workers fit the cores; beyond, the intra-op regions wait on the threads
    whose cores the workers share: ``c_free / exp(STALL·over)``, ``over = min(max(threads + busy − cores,
    0), busy)`` cores."""
    return c_free / math.exp(STALL * _over(busy, threads, cores))


def worker_share(k: int, threads: float, cores: float, computing: float) -> float:
    """W: the cores ``k`` workers get beside ``threads`` torch threads on ``cores`` (module docstring): their own
    ``k`` where all fit; else, while the training process computes (a share ``computing`` of the time), their
    fair share ``k·N/(k + T)`` of the ``k + T`` runnable threads, and the rest of the time (it waits for a
    batch, its threads idle) ``min(k, N)``."""
    if k + threads <= cores:
        return float(k)
    busy = min(max(computing, 0.0), 1.0)
    return busy * k * cores / (k + threads) + (1.0 - busy) * min(float(k), cores)


def receive_when_ready(steps: pd.DataFrame) -> float | None:
    """Seconds a sample the training process takes to receive a batch that was already waiting: the median
    ``data_wait_s`` per sample of the counted steps with ``ready_batches >= 1`` (module docstring, ``q``); None
    where fewer than ``MIN_READY_STEPS`` or ``MIN_READY_SHARE`` of them found one (the waits are then the
    workers', not the handover's) or readiness was not observed."""
    if steps.empty or "ready_batches" not in steps or "data_wait_s" not in steps:
        return None
    ready = steps[pd.to_numeric(steps["ready_batches"], errors="coerce") >= 1]
    if len(ready) < max(MIN_READY_STEPS, MIN_READY_SHARE * len(steps)):
        return None
    per_sample = pd.to_numeric(ready["data_wait_s"], errors="coerce") / pd.to_numeric(ready["samples"],
                                                                                       errors="coerce")
    value = per_sample.median()
    return float(value) if math.isfinite(value) and value >= 0 else None


def _over(busy: float, threads: float, cores: float) -> float:
    """The cores workers busy ``busy`` cores take beyond those ``threads`` torch threads leave free."""
    return min(max(threads + busy - cores, 0.0), busy)


@dataclass(frozen=True)
class WorkerCosts:
    """What ``k`` workers cost: the loader's samples/s alone, the training process's CPU per sample receiving
    (``q_k``), the workers' CPU per sample (``u_k``) and their start-up per pass; measured or estimated."""

    samples_per_s: float
    receive_s: float
    cpu_s: float
    startup_s: float
    measured: bool = True


def _workers_probes(what_ifs: dict[str, Any]) -> dict[int, WorkerCosts]:
    """run.json ``what_ifs.loader_workers``: k -> its measured ``WorkerCosts``."""
    out: dict[int, WorkerCosts] = {}
    for key, entry in as_dict(what_ifs.get("loader_workers")).items():
        entry = as_dict(entry)
        rate = _positive(entry.get("samples_per_s"))
        receive, cpu = entry.get("receive_cpu_s_per_sample"), entry.get("worker_cpu_s_per_sample")
        if rate is None or not isinstance(receive, (int, float)) or not isinstance(cpu, (int, float)) \
                or not str(key).isdigit():
            continue
        startup = _positive(entry.get("startup_s"))
        out[int(key)] = WorkerCosts(rate, max(float(receive), 0.0), max(float(cpu), 0.0),
                                    startup if startup is not None else STARTUP_S_PER_WORKER * int(key))
    return out


@dataclass(frozen=True)
class TrainedProbe:
    """The training loop fed by ``k`` workers (``what_ifs.train_workers``, ``train_threads`` or
    ``train_ram_workers``): its samples/s, at ``threads`` torch threads, the workers' start-up per pass."""

    samples_per_s: float
    threads: float
    startup_s: float
    source: str  # the what_ifs entry it came from


def _trained_probes(what_ifs: dict[str, Any], name: str = "train_workers") -> dict[int, TrainedProbe]:
    """run.json ``what_ifs.train_workers`` (or ``train_threads``, ``train_ram_workers``): k -> its
    ``TrainedProbe`` (entries absent or malformed left out)."""
    out: dict[int, TrainedProbe] = {}
    for key, entry in as_dict(what_ifs.get(name)).items():
        entry = as_dict(entry)
        rate, threads = _positive(entry.get("samples_per_s")), _positive(entry.get("threads"))
        if rate is None or threads is None or not str(key).isdigit():
            continue
        startup = _positive(entry.get("startup_s"))
        out[int(key)] = TrainedProbe(rate, threads, startup if startup is not None else STARTUP_S_PER_WORKER * int(key),
                                     name)
    return out


def _probe_rate(what_ifs: dict[str, Any], name: str) -> float | None:
    """A what-if probe's samples/s (run.json ``what_ifs``), None where absent or not a positive number."""
    return _positive(as_dict(what_ifs.get(name)).get("samples_per_s"))


def _positive(value: Any) -> float | None:
    """``value`` as a finite number > 0, else None."""
    if not isinstance(value, (int, float)) or not math.isfinite(float(value)) or value <= 0:
        return None
    return float(value)


def _bytes_per_sample(loading: pd.DataFrame | None) -> float:
    if loading is None or loading.empty or "nbytes" not in loading:
        return float(SAMPLE_BYTES)
    nbytes = pd.to_numeric(loading["nbytes"], errors="coerce").sum()
    samples = pd.to_numeric(loading["samples"], errors="coerce").sum()
    return float(nbytes / samples) if samples and nbytes else float(SAMPLE_BYTES)
