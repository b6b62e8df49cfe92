"""Scenarios: frozen, validated descriptions of what to train and how to load it.

A scenario is a TOML file (see docs/scenarios.md) with top-level
``name`` and ``description`` and the sections ``[data]``, ``[loader]``,
``[model]``, ``[train]`` and ``[profile]``. Loader keys are the DataLoader's
own argument names. Validation is strict: an unknown key, a wrong type or an
impossible value raises ``UsageError`` with one line naming the file, the key,
the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from pipeprof import machine_limits
from pipeprof.errors import UsageError
from pipeprof.format import printable, setting_literal
from pipeprof.loader_rules import worker_only_conflicts

STORAGE_KINDS = ("device", "ram", "memmap", "files", "images")
ON_DISK = ("memmap", "files", "images")
IN_MEMORY = ("ram", "device")  # held whole in memory (the host's, or the device's copied from it)
# Every generated sample: 28 x 28 float32 values (``storage/synthetic.py`` makes them; the model and the
# recommendations size the data set by them). Here, not in storage/, so the analysis reads it without torch.
SAMPLE_FEATURES = 784
SAMPLE_BYTES = SAMPLE_FEATURES * 4
TRANSFORMS = ("none", "normalize", "augment")
IMAGE_FORMATS = ("png", "jpeg")
ACTIVATIONS = ("relu", "sigmoid", "tanh", "leaky_relu", "prelu")
INITS = ("default", "xavier", "uniform", "normal")
IMPLEMENTATIONS = ("module", "scratch")
INT64 = (-(2**63), 2**63 - 1)  # TOML's integers: a value outside cannot be held losslessly (nor by torch or numpy)
MAX_CUDA_INDEX = 127  # torch keeps a device index in an int8: cuda:128 wraps to cuda:-128
MAX_SCENARIO_BYTES = 1 << 20  # a scenario is a few hundred bytes; /dev/zero must not be read until memory runs out


@dataclass(frozen=True)
class ThrottleSpec:
    """Emulated slow storage: every read waits ``latency_ms`` plus its bytes at ``bandwidth_mb_s``."""

    latency_ms: float
    bandwidth_mb_s: float
    preset: str | None = None


# Emulation presets (orders of magnitude, per read): a spinning disk's seek and
# rotation, a network file system over 1 GbE, and an object store's time to first byte.
THROTTLE_PRESETS = {
    "hdd": ThrottleSpec(latency_ms=8.0, bandwidth_mb_s=150.0, preset="hdd"),
    "nfs": ThrottleSpec(latency_ms=1.0, bandwidth_mb_s=110.0, preset="nfs"),
    "object": ThrottleSpec(latency_ms=30.0, bandwidth_mb_s=80.0, preset="object"),
}


@dataclass(frozen=True)
class DataSpec:
    storage: str = "ram"
    samples: int = 20_000
    seed: int = 0
    format: str = "png"  # images only
    quality: int = 90  # jpeg only
    cache: str = "warm"
    throttle: ThrottleSpec | None = None
    transform: str = "none"
    augment_passes: int = 1  # random-affine passes per sample: the CPU cost knob of "augment"
    # With train.ranks >= 2: the ranks whose reads the throttle slows (an input straggler); () = every rank.
    slow_ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class LoaderSpec:
    batch_size: int = 64
    num_workers: int = 0
    prefetch_factor: int | None = None  # DataLoader's default (2) when None and workers > 0
    pin_memory: bool = False
    persistent_workers: bool = False
    shuffle: bool = True
    drop_last: bool = False


@dataclass(frozen=True)
class ModelSpec:
    hidden: tuple[int, ...] = (256, 128)
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    activation: str = "relu"
    init: str = "default"
    implementation: str = "module"  # module: nn.Sequential; scratch: explicit tensors and a hand-written SGD
    compile: bool = False  # torch.compile the model


@dataclass(frozen=True)
class TrainSpec:
    steps: int | None = None
    epochs: int | None = None
    warmup_steps: int = 5
    device: str = "auto"
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    steady: bool = False  # stop once windowed throughput is stable; what came before counts as warm-up
    max_seconds: float = 0.0  # stop after this long (0: no limit)
    steady_cv: float = 0.05  # stable: the last steady_windows windows within this coefficient of variation
    steady_windows: int = 5
    steady_window_s: float = 0.5  # a window: at least this long (and at least 3 steps)
    ranks: int = 1  # processes of a DDP job on this machine (gloo on CPU, NCCL on CUDA); 1: one process, no DDP


@dataclass(frozen=True)
class ProfileSpec:
    sample_hz: float = 10.0
    uss_interval_s: float = 5.0
    tree_refresh_s: float = 1.0
    loading: bool = True  # time fetch / prep / collate inside the workers (~1 us per sample)
    cprofile_steps: int = 0  # cProfile this many counted steps right after warm-up (and the workers); 0 = off
    pyspy_hz: int = 0  # py-spy samples the process tree at this rate; 0 = off
    what_ifs: bool = True  # after a complete run, the probes the predictions are measured from
    what_ifs_s: float = 0.0  # the probes' total budget; 0: the larger of 3 s and 10 % of the run's training


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    data: DataSpec = field(default_factory=DataSpec)
    loader: LoaderSpec = field(default_factory=LoaderSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    profile: ProfileSpec = field(default_factory=ProfileSpec)

    def steps_per_epoch(self) -> int:
        """Batches in one pass over the data, per process: each of several ranks reads its shard, the
        samples divided by the ranks rounded up (DistributedSampler pads the last shards to equal size)."""
        shard = -(-self.data.samples // self.train.ranks)
        full, rest = divmod(shard, self.loader.batch_size)
        return full if (self.loader.drop_last or rest == 0) else full + 1

    def total_steps(self) -> int:
        if self.train.steps is not None:
            return self.train.steps
        assert self.train.epochs is not None  # validation: exactly one of steps and epochs
        return self.train.epochs * self.steps_per_epoch()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model"]["hidden"] = list(self.model.hidden)
        d["data"]["slow_ranks"] = list(self.data.slow_ranks)
        return d


# ---- the schema: one Rule per key --------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    kind: str  # "int", "float", "bool", "str", "int-list"
    allowed: str  # what is allowed, in words, for the error line
    check: Callable[[Any], bool] = lambda v: True
    nullable: bool = False


def _int(minimum: int, nullable: bool = False) -> Rule:
    allowed = f"an integer >= {minimum}" + (" (or leave it out)" if nullable else "")
    return Rule("int", allowed, lambda v: v >= minimum, nullable)


def _positive_float(what: str = "a number > 0") -> Rule:
    return Rule("float", what, lambda v: v > 0)


def _choice(*choices: str) -> Rule:
    return Rule("str", "one of " + ", ".join(repr(c) for c in choices), lambda v: v in choices)


def _device_ok(value: str) -> bool:
    if value in ("auto", "cpu", "cuda"):
        return True
    prefix, _, index = value.partition(":")
    # ASCII digits without a leading zero: torch.device() refuses 'cuda:²', 'cuda:٣' and 'cuda:01'.
    return (prefix == "cuda" and index.isascii() and index.isdigit() and len(index) <= 3
            and str(int(index)) == index and int(index) <= MAX_CUDA_INDEX)


BOOL = Rule("bool", "true or false")
TEXT = Rule("str", "a string")

SCHEMA: dict[str, dict[str, Rule]] = {
    "": {"name": Rule("str", "a non-empty string", lambda v: bool(v.strip())), "description": TEXT},
    "data": {
        "storage": _choice(*STORAGE_KINDS),
        "samples": _int(1),
        "seed": _int(0),
        "format": _choice(*IMAGE_FORMATS),
        "quality": Rule("int", "an integer from 1 to 100", lambda v: 1 <= v <= 100),
        "cache": _choice("warm", "cold"),
        "throttle": Rule("throttle", "a preset (" + ", ".join(repr(p) for p in THROTTLE_PRESETS)
                         + ") or a table {latency_ms = >= 0, bandwidth_mb_s = > 0}", lambda v: True),
        "transform": _choice(*TRANSFORMS),
        "augment_passes": _int(1),
        "slow_ranks": Rule("int-list", "a list of rank numbers, each an integer >= 0, e.g. [1]",
                           lambda v: all(r >= 0 for r in v)),
    },
    "loader": {
        "batch_size": _int(1),
        "num_workers": _int(0),
        "prefetch_factor": _int(1, nullable=True),
        "pin_memory": BOOL,
        "persistent_workers": BOOL,
        "shuffle": BOOL,
        "drop_last": BOOL,
    },
    "model": {
        "hidden": Rule("int-list", "a non-empty list of layer widths, each an integer >= 1, e.g. [256, 128]",
                       lambda v: len(v) >= 1 and all(w >= 1 for w in v)),
        "lr": _positive_float(),
        "momentum": Rule("float", "a number in [0, 1)", lambda v: 0 <= v < 1),
        "seed": _int(0),
        "activation": _choice(*ACTIVATIONS),
        "init": _choice(*INITS),
        "implementation": _choice(*IMPLEMENTATIONS),
        "compile": BOOL,
    },
    "train": {
        "steps": _int(1, nullable=True),
        "epochs": _int(1, nullable=True),
        "warmup_steps": _int(0),
        "device": Rule("str", f"'auto', 'cpu', 'cuda' or 'cuda:N' (N from 0 to {MAX_CUDA_INDEX})", _device_ok),
        "threads": _int(0),
        "steady": BOOL,
        "max_seconds": Rule("float", "a number of seconds >= 0 (0: no limit)", lambda v: v >= 0),
        "steady_cv": Rule("float", "a coefficient of variation > 0 and < 1", lambda v: 0 < v < 1),
        "steady_windows": _int(2),
        "steady_window_s": _positive_float("a number of seconds > 0"),
        "ranks": _int(1),
    },
    "profile": {
        "sample_hz": Rule("float", "a rate in Hz, > 0 and <= 1000", lambda v: 0 < v <= 1000),
        "uss_interval_s": _positive_float("a number of seconds > 0"),
        "tree_refresh_s": _positive_float("a number of seconds > 0"),
        "loading": BOOL,
        "cprofile_steps": _int(0),
        "pyspy_hz": Rule("int", "0 (off) or a rate in Hz, an integer from 1 to 1000", lambda v: 0 <= v <= 1000),
        "what_ifs": BOOL,
        "what_ifs_s": Rule("float", "a number of seconds >= 0 (0: the larger of 3 s and 10 % of the run's training)",
                           lambda v: v >= 0),
    },
}

SECTION_TYPES = {"data": DataSpec, "loader": LoaderSpec, "model": ModelSpec, "train": TrainSpec,
                 "profile": ProfileSpec}


def _is_int(value: Any) -> bool:
    """A TOML integer: not a bool, and within 64 bits (tomllib reads longer ones; float() of them overflows)."""
    return isinstance(value, int) and not isinstance(value, bool) and INT64[0] <= value <= INT64[1]


def _is_number(value: Any) -> bool:
    """An integer, or a finite float: inf seconds or an inf learning rate is no setting (nan fails every check)."""
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _type_ok(rule: Rule, value: Any) -> bool:
    if rule.kind == "int":
        return _is_int(value)
    if rule.kind == "float":
        return _is_number(value)
    if rule.kind == "bool":
        return isinstance(value, bool)
    if rule.kind == "str":
        return isinstance(value, str)
    if rule.kind == "int-list":
        return isinstance(value, list) and all(_is_int(w) for w in value)
    if rule.kind == "throttle":
        return isinstance(value, (str, dict))
    raise AssertionError(rule.kind)


def _key_name(section: str, key: str) -> str:
    key = printable(key)
    return f"{section}.{key}" if section else key


def _check_value(where: str, section: str, key: str, value: Any) -> Any:
    rule = SCHEMA[section][key]
    name = _key_name(section, key)
    if rule.nullable and value is None:
        return None
    if not _type_ok(rule, value) or not rule.check(value):
        raise UsageError(f"{where}: {name} = {setting_literal(value)} is not allowed: expected {rule.allowed}")
    if rule.kind == "float":
        return float(value)
    if rule.kind == "int-list":
        return tuple(value)
    if rule.kind == "throttle":
        return _throttle(where, name, value, rule)
    return value


def _throttle(where: str, name: str, value: str | dict, rule: Rule) -> ThrottleSpec:
    if isinstance(value, str):
        if value not in THROTTLE_PRESETS:
            raise UsageError(f"{where}: {name} = {setting_literal(value)} is not allowed: expected {rule.allowed}")
        return THROTTLE_PRESETS[value]
    allowed = {"latency_ms": lambda v: v >= 0, "bandwidth_mb_s": lambda v: v > 0}
    for key, sub in value.items():
        if key not in allowed:
            raise UsageError(f"{where}: unknown key {name}.{printable(key)}; allowed: latency_ms, bandwidth_mb_s")
        if not _is_number(sub) or not allowed[key](sub):
            what = "a number >= 0" if key == "latency_ms" else "a number > 0"
            raise UsageError(f"{where}: {name}.{key} = {setting_literal(sub)} is not allowed: expected {what}")
    missing = [k for k in allowed if k not in value]
    if missing:
        raise UsageError(f"{where}: {name} needs {' and '.join(missing)} (or a preset: "
                         f"{', '.join(THROTTLE_PRESETS)})")
    return ThrottleSpec(float(value["latency_ms"]), float(value["bandwidth_mb_s"]))


def _unknown(where: str, section: str, key: str, known: list[str]) -> UsageError:
    name = _key_name(section, key)
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {_key_name(section, close[0])}?)" if close else ""
    place = f"[{section}]" if section else "the top level"
    return UsageError(f"{where}: unknown key {name}{hint}; allowed in {place}: {', '.join(known)}")


# ---- loading ------------------------------------------------------------------------------


def toml_value(text: str) -> Any:
    """``text`` read as one TOML value (``4``, ``true``, ``[256,128]``); anything else stays a string (a bare word).

    Anything else includes text that is not exactly one value (``1\\n[loader]\\n...``: nothing after the
    value is read), nesting too deep for tomllib and integers too long for Python's ``int()``.
    """
    try:
        doc = tomllib.loads(f"v = {text}")
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError, and so is int() of 4301 digits
        return text.strip()
    return doc["v"] if len(doc) == 1 else text.strip()


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` and read the value as TOML (a bare word stays a string)."""
    where = f"--set {printable(text)}"
    lhs, sep, rhs = text.partition("=")
    if not sep or not lhs.strip():
        raise UsageError(f"{where}: expected section.key=value, e.g. loader.num_workers=2")
    section, _, key = lhs.strip().rpartition(".")
    return section, key, toml_value(rhs)  # e.g. data.storage=memmap: a bare word is a string


def read_toml(path: str | Path) -> dict[str, Any]:
    """A scenario file parsed; UsageError (one line) when it cannot be read or is not TOML."""
    path = Path(path)
    where = printable(str(path))
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SCENARIO_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{where}: scenario file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: is a directory, expected a scenario .toml file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL character in the path
        raise UsageError(f"{where}: cannot read scenario file ({printable(str(e))})") from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise UsageError(f"{where}: too large for a scenario file (over {MAX_SCENARIO_BYTES} bytes)")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: cannot read scenario file ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{where}: not valid TOML: {printable(str(e))}") from None
    except RecursionError:
        raise UsageError(f"{where}: not valid TOML: arrays or inline tables nested too deeply") from None
    except ValueError:  # int() of an integer literal of thousands of digits
        raise UsageError(f"{where}: not valid TOML: an integer too long to read (TOML integers are 64-bit)") from None


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file. Raises UsageError (one line)."""
    path = Path(path)
    raw = read_toml(path)
    raw.setdefault("name", path.stem)
    return scenario_from_dict(raw, printable(str(path)), overrides)


def scenario_from_dict(raw: dict[str, Any], where: str, overrides: Sequence[str] = ()) -> Scenario:
    """Validate a parsed scenario (plus ``--set`` overrides) into a Scenario."""
    values: dict[str, dict[str, Any]] = {s: {} for s in SCHEMA}
    for key, value in raw.items():
        if key == "sweep":
            continue  # the grid of `pipeprof sweep` (pipeprof.grid checks it); not a setting of this run
        if key in SECTION_TYPES:
            if not isinstance(value, dict):
                raise UsageError(f"{where}: {key} = {setting_literal(value)} is not allowed: expected a [{key}] table")
            for sub, subvalue in value.items():
                _put(values, where, key, sub, subvalue)
        else:
            _put(values, where, "", key, value)
    for text in overrides:
        section, key, value = parse_override(text)
        if section and section not in SECTION_TYPES:
            raise UsageError(f"--set {printable(text)}: unknown section [{printable(section)}]; allowed: "
                             f"{', '.join(SECTION_TYPES)}")
        _put(values, f"--set {printable(text)} (on {where})", section, key, value)
        # --set train.epochs replaces the file's train.steps, and the other way round.
        if section == "train" and key in ("steps", "epochs"):
            values["train"].pop("epochs" if key == "steps" else "steps", None)
    return _build(values, where)


def _put(values: dict[str, dict[str, Any]], where: str, section: str, key: str, value: Any) -> None:
    if key not in SCHEMA[section]:
        raise _unknown(where, section, key, list(SCHEMA[section]))
    values[section][key] = _check_value(where, section, key, value)


def _check_data(where: str, data: DataSpec, given: dict[str, Any], loader: LoaderSpec) -> None:
    """Keys that only make sense with some storage kinds."""
    storage = f"data.storage = {data.storage!r}"
    for key, kinds in (("format", ("images",)), ("quality", ("images",)), ("throttle", ON_DISK + ("ram",))):
        if key in given and data.storage not in kinds:
            raise UsageError(f"{where}: data.{key} is not allowed with {storage}: it applies to "
                             f"{', '.join(repr(k) for k in kinds)}")
    if "quality" in given and data.format != "jpeg":
        raise UsageError(f"{where}: data.quality is not allowed with data.format = {data.format!r}: it applies to 'jpeg'")
    if data.cache == "cold" and data.storage not in ON_DISK:
        raise UsageError(f"{where}: data.cache = 'cold' is not allowed with {storage}: a cold page cache needs "
                         f"data on disk ({', '.join(repr(k) for k in ON_DISK)})")
    if data.cache == "cold" and data.storage == "memmap" and loader.persistent_workers:
        raise UsageError(f"{where}: data.cache = 'cold' is not allowed with {storage} and "
                         f"loader.persistent_workers = true: persistent workers keep the file mapped, and mapped "
                         f"pages cannot be dropped from the page cache")
    if "augment_passes" in given and data.transform != "augment":
        raise UsageError(f"{where}: data.augment_passes is not allowed with data.transform = "
                         f"{data.transform!r}: it applies to 'augment'")
    if data.storage == "device" and loader.num_workers:
        raise UsageError(f"{where}: loader.num_workers = {loader.num_workers} is not allowed with {storage}: "
                         f"batches are taken on the device by index, with no DataLoader (use num_workers = 0)")


def _build(values: dict[str, dict[str, Any]], where: str) -> Scenario:
    sections = {name: cls(**values[name]) for name, cls in SECTION_TYPES.items()}
    loader, train, data = sections["loader"], sections["train"], sections["data"]
    _check_data(where, data, values["data"], loader)
    conflicts = worker_only_conflicts(loader.num_workers, dataclasses.asdict(loader))
    if conflicts:
        key = conflicts[0]
        raise UsageError(
            f"{where}: loader.{key} = {setting_literal(getattr(loader, key))} is not allowed with "
            f"loader.num_workers = 0: it needs worker processes (num_workers >= 1)")
    if (train.steps is None) == (train.epochs is None):
        raise UsageError(f"{where}: [train] needs exactly one of steps or epochs "
                         f"(steps = {train.steps}, epochs = {train.epochs})")
    scenario = Scenario(name=values[""].get("name", "scenario"),
                        description=values[""].get("description", ""), **sections)
    _check_machine(where, scenario, machine_limits.current())
    if scenario.steps_per_epoch() == 0:
        raise UsageError(f"{where}: loader.drop_last = true is not allowed with data.samples = {data.samples} "
                         f"{f'over {train.ranks} ranks ' if train.ranks > 1 else ''}and loader.batch_size = {loader.batch_size}: "
                         f"every batch would be dropped (expected at least {loader.batch_size * train.ranks} "
                         f"samples, or drop_last = false)")
    total = scenario.total_steps()
    if train.warmup_steps >= total:
        raise UsageError(f"{where}: train.warmup_steps = {train.warmup_steps} is not allowed: expected fewer "
                         f"than the {total} steps of the run, so some steps are counted")
    _check_ranks(where, scenario)
    return scenario


def _check_machine(where: str, scenario: Scenario, limits: machine_limits.MachineLimits) -> None:
    """The counts this machine can start and hold (``machine_limits``): workers (over the job's ranks),
    torch threads, and a data set held in memory."""
    loader, train, data = scenario.loader, scenario.train, scenario.data
    most = limits.most_workers()
    _at_most(where, "loader.num_workers", loader.num_workers, max(1, most // train.ranks), limits,
             each=f" a rank of {train.ranks}" if train.ranks > 1 else "")
    _at_most(where, "train.threads", train.threads, most, limits, note="; 0 keeps torch's default")
    if data.storage in IN_MEMORY and limits.memory_bytes is not None and \
            data.samples * SAMPLE_BYTES > limits.memory_bytes:
        fits = limits.memory_bytes // SAMPLE_BYTES
        raise UsageError(f"{where}: data.samples = {data.samples} is not allowed with data.storage = "
                         f"{data.storage!r}: expected 1 to {fits}, what this machine's "
                         f"{limits.memory_bytes / 2**30:.1f} GiB of memory holds at {SAMPLE_BYTES} bytes a sample")


def _check_ranks(where: str, scenario: Scenario) -> None:
    """What a DDP job of ``train.ranks`` processes needs (``pipeline/ranks_run.py`` runs it)."""
    data, ranks, model = scenario.data, scenario.train.ranks, scenario.model
    if data.slow_ranks:
        slow = f"data.slow_ranks = {setting_literal(list(data.slow_ranks))}"
        if ranks < 2:
            raise UsageError(f"{where}: {slow} is not allowed with train.ranks = {ranks}: it slows some ranks "
                             f"of a job of several (train.ranks >= 2)")
        if data.throttle is None:
            raise UsageError(f"{where}: {slow} needs data.throttle: the slow ranks' reads wait as it says")
        beyond = [r for r in data.slow_ranks if r >= ranks]
        if beyond:
            raise UsageError(f"{where}: {slow} is not allowed with train.ranks = {ranks}: rank {beyond[0]} "
                             f"does not exist (ranks 0 .. {ranks - 1})")
    if ranks < 2:
        return
    job = f"train.ranks = {ranks}"
    if model.implementation == "scratch":
        raise UsageError(f"{where}: {job} is not allowed with model.implementation = 'scratch': "
                         f"DistributedDataParallel wraps an nn.Module (use 'module')")
    if model.compile:
        raise UsageError(f"{where}: {job} is not allowed with model.compile = true: a DDP model compiles "
                         f"in graph pieces, and the compiled forward here is one graph")


def check_key(where: str, dotted: str, value: Any) -> None:
    """Validate one ``section.key`` and its value alone (unknown key, wrong type, impossible value).

    Whether it fits the rest of a scenario is ``scenario_from_dict``'s job.
    """
    section, _, key = dotted.rpartition(".")
    if section not in SECTION_TYPES:
        raise UsageError(f"{where}: {printable(dotted)} is not a scenario key: expected section.key with section "
                         f"one of {', '.join(SECTION_TYPES)}")
    if key not in SCHEMA[section]:
        raise _unknown(where, section, key, list(SCHEMA[section]))
    _check_value(where, section, key, value)
    if dotted in ("loader.num_workers", "train.threads"):  # more than this machine starts whatever goes with it
        limits = machine_limits.current()
        _at_most(where, dotted, value, limits.most_workers(), limits)


def _at_most(where: str, dotted: str, value: int, most: int, limits: machine_limits.MachineLimits, *,
             each: str = "", note: str = "") -> None:
    """A count this machine cannot start (``machine_limits``) refused: "expected 0 to ``most````each`` on this
    machine (why``note``)"."""
    if value > most:
        raise UsageError(f"{where}: {dotted} = {value} is not allowed: expected 0 to {most}{each} on this machine "
                         f"({limits.where()}{note})")
