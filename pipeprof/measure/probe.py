"""The machine's ceilings: what memory, disk, host-to-device copies and matmuls can do here.

A training pipeline cannot beat its machine: a loader reading 3 KiB samples
from a cold disk is bounded by the disk's random-read IOPS, a batch copied to
the GPU by the host-to-device bandwidth, the model by matmul throughput.
``run_probe`` measures these once (~10-20 s; ``quick`` a few seconds), with
the facts that identify the machine (``machine_facts``, hashed into
``machine_key``); ``pipeprof.measure.probe_cache`` keeps the result per
machine, so the diagnosis can compare a run against its ceilings without
measuring every time.

Every measurement is a dict with ``method``, the raw per-repeat ``times_s``
and the median / min / max over the repeats, the unit in the key name
(``median_bytes_per_s``, ``median_reads_per_s``, ``median_gflop_per_s``).
What cannot be measured here is ``{"absent": reason}``: never a zero, never
a warm number passed off as a cold one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import os
import platform
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.environment import cpu_model, usable_cores
from pipeprof.measure.gpu import Absent, gpu_inventory
from pipeprof.storage import pagecache
from pipeprof.storage.materialize import cache_key
from pipeprof.storage.synthetic import default_cache_root
from pipeprof.version import __version__

PROBE_FORMAT_VERSION = 1
MATMUL_SIZES = (1024, 1025, 1026, 1028, 1032)  # aligned, then misaligned by 1, 2, 4, 8
SEQUENTIAL_CHUNK_BYTES = 1 << 20  # one read() of the sequential pass (8 MiB measured no faster here)
RANDOM_READ_BYTES = 4096  # one random read: a page, at a page-aligned offset
_MAX_CALLS_PER_REPEAT = 10_000
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # measured_at_utc

Now = Callable[[], dt.datetime]
Drop = Callable[[Sequence[Path]], pagecache.DropResult]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass(frozen=True)
class ProbePlan:
    """How much each measurement does. ``FULL`` and ``QUICK`` are the CLI's; tests pass tiny ones."""

    memory_bytes: int  # buffer copied by the memory-bandwidth test
    memory_repeats: int
    disk_bytes: int  # test file read sequentially and at random
    disk_repeats: int  # passes (sequential) and rounds (random), each for cold and for warm
    random_reads: int  # 4 KiB reads per random round (at most one per page of the file)
    random_round_max_s: float  # a round on a very slow disk stops early, counting what it read
    matmul_sizes: tuple[int, ...]
    matmul_warmup: int
    matmul_repeats: int
    matmul_min_repeat_s: float  # a timed repeat loops the matmul until it lasts this long (fast GPUs)
    h2d_bytes: int
    h2d_repeats: int


# FULL takes ~15 s on a 2-core machine with an SSD: cold rounds (~0.4 s each) and CPU
# matmuls (~65 ms each at 1024) are most of it.
FULL = ProbePlan(memory_bytes=256 << 20, memory_repeats=15, disk_bytes=256 << 20, disk_repeats=5,
                 random_reads=4000, random_round_max_s=2.0, matmul_sizes=MATMUL_SIZES, matmul_warmup=2,
                 matmul_repeats=10, matmul_min_repeat_s=0.1, h2d_bytes=64 << 20, h2d_repeats=10)
QUICK = ProbePlan(memory_bytes=64 << 20, memory_repeats=3, disk_bytes=64 << 20, disk_repeats=2,
                  random_reads=1000, random_round_max_s=0.5, matmul_sizes=MATMUL_SIZES, matmul_warmup=1,
                  matmul_repeats=3, matmul_min_repeat_s=0.01, h2d_bytes=16 << 20, h2d_repeats=3)


# ---- timing and statistics -------------------------------------------------------------


def _no_sync() -> None:
    pass


def _timed(op: Callable[[], object], calls: int, clock: Clock, sync: Callable[[], None]) -> float:
    sync()  # queued work (a previous call's kernels) must not land in this timing
    start = clock()
    for _ in range(calls):
        op()
    sync()  # on CUDA the host runs ahead: wait for the device before reading the clock
    return clock() - start


def time_repeats(op: Callable[[], object], *, clock: Clock, repeats: int, warmup: int = 1,
                 sync: Callable[[], None] = _no_sync, min_repeat_s: float = 0.0) -> tuple[list[float], int]:
    """``(seconds per call of op in each timed repeat, calls per repeat)``.

    ``warmup`` untimed calls come first (page faults, allocator, kernel
    selection: what a single naive timing mostly measures). With
    ``min_repeat_s`` one more call is timed to choose how many calls a repeat
    loops over, so a fast op is not timed at the clock's and sync's resolution.
    """
    for _ in range(warmup):
        op()
    calls = 1
    if min_repeat_s > 0:
        single_s = _timed(op, 1, clock, sync)
        calls = _MAX_CALLS_PER_REPEAT if single_s <= 0 else math.ceil(min_repeat_s / single_s)
        calls = max(1, min(calls, _MAX_CALLS_PER_REPEAT))
    return [_timed(op, calls, clock, sync) / calls for _ in range(repeats)], calls


def spread(values: Sequence[float], unit: str) -> dict[str, Any]:
    """``median_<unit>``, ``min_<unit>``, ``max_<unit>`` over the repeats, and ``repeats``."""
    return {f"median_{unit}": statistics.median(values), f"min_{unit}": min(values),
            f"max_{unit}": max(values), "repeats": len(values)}


def _rates(amount: float, times_s: Sequence[float]) -> list[float]:
    return [amount / t if t > 0 else math.nan for t in times_s]  # NaN: the clock did not move (JSON null)


# ---- memory --------------------------------------------------------------------------------


def measure_memory_bandwidth(nbytes: int, repeats: int, clock: Clock,
                             copy: Callable[[], object] | None = None) -> dict[str, Any]:
    """Bytes/s of one thread copying a ``nbytes`` buffer into another, read + write counted."""
    if copy is None:
        src = np.ones(nbytes, np.uint8)
        dst = np.empty_like(src)  # untouched: the warm-up copy takes its page faults
        copy = lambda: np.copyto(dst, src)  # noqa: E731
    times_s, _ = time_repeats(copy, clock=clock, repeats=repeats, warmup=1)
    return {"method": "numpy.copyto of one buffer into another (memcpy, one thread), 1 warm-up copy, median",
            "counted": "read + write: 2 x buffer_bytes per copy",
            "buffer_bytes": nbytes, "times_s": times_s, **spread(_rates(2 * nbytes, times_s), "bytes_per_s")}


# ---- disk ------------------------------------------------------------------------------------


def _advise(fd: int, advice: str) -> None:
    flag = getattr(os, advice, None)
    if flag is not None:  # without posix_fadvise nothing can be dropped, so cold numbers are absent anyway
        os.posix_fadvise(fd, 0, 0, flag)


def _write_scratch(folder: Path, nbytes: int) -> Path:
    # Random bytes, flushed to the disk: a clean page cache can be dropped.
    block = np.random.default_rng(0).bytes(min(nbytes, 4 << 20))
    fd, name = tempfile.mkstemp(dir=folder, prefix=".probe-disk-", suffix=".tmp")
    try:
        written = 0
        while written < nbytes:
            written += os.write(fd, block[: nbytes - written])
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        Path(name).unlink(missing_ok=True)
        raise
    os.close(fd)
    return Path(name)


def _read_sequential(path: Path, clock: Clock) -> tuple[int, float]:
    fd = os.open(path, os.O_RDONLY)
    try:
        _advise(fd, "POSIX_FADV_SEQUENTIAL")
        buf = [bytearray(SEQUENTIAL_CHUNK_BYTES)]
        total, start = 0, clock()
        while (n := os.readv(fd, buf)) > 0:
            total += n
        return total, clock() - start
    finally:
        os.close(fd)


def _read_random(path: Path, offsets: list[int], clock: Clock, max_s: float) -> tuple[int, float]:
    fd = os.open(path, os.O_RDONLY)
    try:
        _advise(fd, "POSIX_FADV_RANDOM")  # no readahead: one read is one page from the disk
        buf = [bytearray(RANDOM_READ_BYTES)]
        done, start = len(offsets), clock()
        for i, offset in enumerate(offsets):
            os.preadv(fd, buf, offset)
            if i % 256 == 255 and clock() - start > max_s:
                done = i + 1
                break
        return done, clock() - start
    finally:
        os.close(fd)


def _rounds(read: Callable[[], tuple[int, float]], rounds: int, unit: str,
            before: Callable[[], pagecache.DropResult | None]) -> dict[str, Any]:
    """``rounds`` reads, each after ``before()`` (a drop for cold rounds); absent if a drop fails."""
    amounts, times_s, resident = [], [], []
    for _ in range(rounds):
        dropped = before()
        if dropped is not None:
            if not dropped.dropped or dropped.reason is not None:
                return {"absent": f"the page cache was not dropped, so no cold number: {dropped.reason}",
                        "drop": dropped.to_dict()}
            resident.append(dropped.resident_after_bytes)
        amount, seconds = read()
        amounts.append(amount)
        times_s.append(seconds)
    rates = [a / t if t > 0 else math.nan for a, t in zip(amounts, times_s)]
    out = {"times_s": times_s, **spread(rates, unit)}
    if resident:
        out["resident_after_drop_bytes"] = resident
    return out


def _filesystem(path: Path) -> str:
    """Type of the file system holding ``path`` (longest mount point in /proc/mounts), or 'unknown'."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _, mount, fs_type, *_ = line.split()
                mount = mount.replace("\\040", " ")
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                    best, kind = mount, fs_type
    except OSError:
        pass  # not Linux: the type is only informative
    return kind


def measure_disk(folder: Path, plan: ProbePlan, clock: Clock, drop: Drop = pagecache.drop,
                 seed: int = 0) -> dict[str, Any]:
    """Sequential and random 4 KiB reads of a test file in ``folder``, warm and with a cold page cache.

    The file is written, read warm, then dropped (``drop``, verified with
    mincore) before every cold pass or round; a refused drop makes the cold
    number absent with the drop's reason. The file is deleted at the end.
    """
    out: dict[str, Any] = {"folder": str(folder), "filesystem": _filesystem(folder), "file_bytes": plan.disk_bytes}
    try:
        path = _write_scratch(folder, plan.disk_bytes)
    except OSError as e:
        return {**out, "absent": f"cannot write a {plan.disk_bytes} byte test file in {folder}: {e.strerror or e}"}
    rng = np.random.default_rng(seed)
    pages = plan.disk_bytes // RANDOM_READ_BYTES

    def offsets() -> list[int]:  # distinct pages: a page read twice in a round would be a cache hit
        count = min(plan.random_reads, pages)
        return (rng.choice(pages, size=count, replace=False) * RANDOM_READ_BYTES).tolist()

    def sequential() -> tuple[int, float]:
        return _read_sequential(path, clock)

    def random() -> tuple[int, float]:
        return _read_random(path, offsets(), clock, plan.random_round_max_s)

    def warm() -> None:
        return None

    def cold() -> pagecache.DropResult:
        return drop([path])

    try:
        sequential()  # untimed: the file is in the page cache for the warm numbers
        out["resident_before_warm_bytes"] = pagecache.resident_bytes([path])
        n = plan.disk_repeats
        out["sequential_read_warm"] = _rounds(sequential, n, "bytes_per_s", warm)
        out["random_read_warm"] = _rounds(random, n, "reads_per_s", warm)
        out["sequential_read_cold"] = _rounds(sequential, n, "bytes_per_s", cold)
        out["random_read_cold"] = _rounds(random, n, "reads_per_s", cold)
    finally:
        path.unlink(missing_ok=True)
    out["method"] = (f"a {plan.disk_bytes} byte file of random bytes written and fsync'ed in the cache folder; "
                     f"sequential: {SEQUENTIAL_CHUNK_BYTES} byte reads of the whole file (FADV_SEQUENTIAL), "
                     f"{n} passes; random: {RANDOM_READ_BYTES} byte preads at distinct random page-aligned "
                     f"offsets (FADV_RANDOM: no readahead), {n} rounds of up to {plan.random_reads} reads; "
                     "cold: the file dropped from the page cache (posix_fadvise DONTNEED, verified with "
                     "mincore) before every pass/round; warm: the file fully cached; median over passes/rounds")
    return out


# ---- CUDA and matmul -------------------------------------------------------------------------


def measure_h2d(plan: ProbePlan, clock: Clock, cuda_available: bool) -> dict[str, Any]:
    """Host-to-device bytes/s from pinned and from pageable host memory (CUDA only)."""
    if not cuda_available:
        return {"absent": "no CUDA device (torch.cuda.is_available() is False)"}
    import torch

    n = plan.h2d_bytes
    out: dict[str, Any] = {
        "method": f"tensor.copy_ of a {n} byte uint8 host tensor to cuda:0 (non_blocking when pinned), "
                  f"2 warm-up copies, torch.cuda.synchronize() before each clock read, median",
        "buffer_bytes": n, "device": torch.cuda.get_device_name(0)}
    dst = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    for name, pinned in (("pinned", True), ("pageable", False)):
        try:
            src = torch.ones(n, dtype=torch.uint8, pin_memory=pinned)
        except RuntimeError as e:  # page-locked memory refused (ulimit -l, a container)
            out[name] = {"absent": f"cannot allocate {name} host memory: {' '.join(str(e).split())}"}
            continue
        times_s, _ = time_repeats(functools.partial(dst.copy_, src, non_blocking=pinned), clock=clock,
                                  repeats=plan.h2d_repeats, warmup=2, sync=torch.cuda.synchronize)
        out[name] = {"times_s": times_s, **spread(_rates(n, times_s), "bytes_per_s")}
    if "median_bytes_per_s" in out["pinned"] and "median_bytes_per_s" in out["pageable"]:
        out["pinned_over_pageable"] = out["pinned"]["median_bytes_per_s"] / out["pageable"]["median_bytes_per_s"]
    return out


def _torch_matmul(device: str) -> Callable[[int], Callable[[], object]]:
    import torch

    def make(n: int) -> Callable[[], object]:
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=g).to(device)
        b = torch.randn(n, n, generator=g).to(device)
        c = torch.empty(n, n, device=device)
        return lambda: torch.mm(a, b, out=c)

    return make


def measure_matmul(plan: ProbePlan, clock: Clock, device: str = "cpu",
                   make_op: Callable[[int], Callable[[], object]] | None = None,
                   sync: Callable[[], None] = _no_sync) -> dict[str, Any]:
    """GFLOP/s (2 n^3 per matmul) of square float32 matmuls per size, and each size's ratio to the first."""
    import torch

    make_op = make_op or _torch_matmul(device)
    sizes: dict[str, dict[str, Any]] = {}
    for n in plan.matmul_sizes:
        times_s, calls = time_repeats(make_op(n), clock=clock, repeats=plan.matmul_repeats,
                                      warmup=plan.matmul_warmup, sync=sync, min_repeat_s=plan.matmul_min_repeat_s)
        sizes[str(n)] = {"n": n, "calls_per_repeat": calls, "times_s": times_s,
                         **spread(_rates(2 * n**3 / 1e9, times_s), "gflop_per_s")}
    reference = plan.matmul_sizes[0]
    base = sizes[str(reference)]["median_gflop_per_s"]
    for entry in sizes.values():
        entry["ratio_to_reference"] = entry["median_gflop_per_s"] / base if base > 0 else math.nan
    return {"method": (f"torch.mm(a, b, out=c), square float32, {plan.matmul_warmup} warm-up calls, then "
                       f"{plan.matmul_repeats} timed repeats of enough calls to last >= {plan.matmul_min_repeat_s} s "
                       "(synchronized on CUDA), median; 2 n^3 FLOP per matmul"),
            "device": device, "dtype": "float32", "reference_n": reference,
            "torch_threads": torch.get_num_threads(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(), "sizes": sizes}


# ---- the machine and the whole probe ---------------------------------------------------------


def machine_key(facts: dict[str, Any]) -> str:
    """12 hex digits over the facts that identify a machine (any change means another machine)."""
    return cache_key({k: v for k, v in facts.items() if k != "key"})


def machine_facts(inventory: list[dict[str, Any]] | Absent | None = None) -> dict[str, Any]:
    """hostname, CPU model, core counts, RAM and GPU names, with their ``key``."""
    inventory = gpu_inventory() if inventory is None else inventory
    facts = {"hostname": platform.node(), "cpu_model": cpu_model(), "cpu_count_logical": os.cpu_count(),
             "usable_cores": usable_cores(), "ram_bytes": psutil.virtual_memory().total,
             "gpu_names": [] if isinstance(inventory, Absent) else [g.get("name") for g in inventory]}
    return {**facts, "key": machine_key(facts)}


def _gpu_section(inventory: list[dict[str, Any]] | Absent) -> dict[str, Any]:
    if isinstance(inventory, Absent):
        return {"absent": inventory.reason}
    if not inventory:
        return {"absent": "NVML works but sees no GPU"}
    keep = ("nvml_index", "name", "memory_total_bytes", "memory_bus_width_bits", "pcie_link_max_gen",
            "pcie_link_max_width", "absences")
    return {"devices": [{k: g[k] for k in keep if k in g} for g in inventory]}


def run_probe(quick: bool = False, *, scratch_dir: Path | None = None, plan: ProbePlan | None = None,
              clock: Clock = monotonic_clock, now: Now = utc_now, drop: Drop = pagecache.drop,
              machine: dict[str, Any] | None = None, on_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure every ceiling once; the probe dict (see the module docstring). Takes ~10-20 s (quick: seconds).

    ``scratch_dir`` holds the disk test file (default: the cache folder);
    ``plan`` overrides the sizes ``quick`` picks.
    """
    import torch

    stage = on_stage or (lambda name: None)
    plan = plan or (QUICK if quick else FULL)
    folder = Path(scratch_dir) if scratch_dir is not None else default_cache_root()
    started_at, start_s = now(), clock()
    inventory = gpu_inventory()
    cuda = torch.cuda.is_available()
    probe: dict[str, Any] = {
        "format_version": PROBE_FORMAT_VERSION, "pipeprof": __version__, "torch": torch.__version__,
        "measured_at_utc": started_at.strftime(TIME_FORMAT), "quick": quick, "plan": dataclasses.asdict(plan),
        "machine": machine or machine_facts(inventory), "gpu": _gpu_section(inventory),
        "cpu": {"usable_cores": usable_cores(), "cpu_count_logical": os.cpu_count(),
                "torch_threads": torch.get_num_threads()}}
    stage("memory bandwidth")
    probe["memory_bandwidth"] = measure_memory_bandwidth(plan.memory_bytes, plan.memory_repeats, clock)
    stage("disk reads, warm and cold")
    probe["disk"] = measure_disk(folder, plan, clock, drop)
    stage("host-to-device copies")
    probe["h2d"] = measure_h2d(plan, clock, cuda)
    stage("matrix multiplies")
    device = "cuda:0" if cuda else "cpu"
    probe["matmul"] = measure_matmul(plan, clock, device, sync=torch.cuda.synchronize if cuda else _no_sync)
    probe["probe_duration_s"] = clock() - start_s
    return probe
