"""``pipeprof profile --loader KEY=VALUE --threads N``: a script's DataLoader settings and threads, set from outside.

Two halves, one module:

* **The parent** (``pipeprof profile``) parses and checks the flags before
  the script starts (``parse``): the key must be a parameter of
  ``DataLoader.__init__`` that a literal can set, the value a Python literal
  of a fitting type; anything else is a ``UsageError`` (one line, exit 2).
  The request travels to every hooked process as JSON in
  ``PIPEPROF_OVERRIDES`` (``protocol.OVERRIDES_ENV``).
* **The hooked process** (``boot`` and ``rank_boot``) arms them after the
  hooks (``arm``): ``torch.set_num_threads(N)`` at once, and a wrapper over
  ``DataLoader.__iter__`` that changes a loader's settings at its *first*
  ``iter()``, before its iterator (and its workers) exist.

**When and to which loader.** At its first ``iter()`` a loader has the name
the user's code gives it (``loader_names``: ``train_loader``,
``self.train_loader``, Lightning's ``train_dataloader``), which is not known
yet at construction (``self.train_loader = DataLoader(...)`` assigns after
``__init__``). ``--loader NAME.KEY=VALUE`` applies to every loader of that
name (its whole name, or its last dotted part: ``train_loader`` matches
``self.train_loader``). A plain ``--loader KEY=VALUE`` applies to every loader
that looks like training at its first ``iter()``: not named for evaluation
(``val``, ``valid``, ``eval``, ``test`` as a word of its name) and iterated
with gradients on (evaluation loops, Lightning's included, iterate under
``torch.no_grad`` / inference mode). Loaders rebuilt every epoch get it each
time. Which loader really trained is known only afterwards (the steps), so
the run records what was applied to which loader, and the session notes an
override that went to a loader that turned out to be an evaluation loader,
or a name the script never iterated.

**How.** ``num_workers``, ``pin_memory``, ``prefetch_factor``, ``timeout``,
``multiprocessing_context``, ``pin_memory_device`` are plain attributes the
DataLoader lets one set after construction. ``batch_size``, ``drop_last`` and
``persistent_workers`` it refuses (``DataLoader.__setattr__``): they are set
with ``object.__setattr__``, and a new batch size or ``drop_last`` rebuilds
the ``BatchSampler`` over the loader's own sampler -- only where the loader
batches by itself (``batch_size`` not None); a loader given its own
``batch_sampler`` keeps it, and the run says so. Worker-only settings stay
consistent (``loader_rules``): 0 workers drops ``prefetch_factor`` and
``persistent_workers``; workers without a prefetch factor get PyTorch's
default.

**Threads.** ``--threads N`` calls ``torch.set_num_threads(N)`` before the
script runs and holds it there: the script's own ``torch.set_num_threads``
calls are recorded (``script_asked``) and do not change it -- the override is
what was asked for from outside, and a tuner comparing thread counts must get
the count it set. torch's own calls pass through: a DataLoader worker (forked,
or spawned and armed by ``rank_boot``) still sets its 1 thread.

What was applied is written by each process to ``overrides-<pid>.jsonl`` in
the job's event folder (one JSON object a line), which ``Session`` reads.
The parent half imports the standard library only until it checks a key
against ``DataLoader.__init__``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeprof.errors import UsageError
from pipeprof.loader_rules import DEFAULT_PREFETCH_FACTOR

if TYPE_CHECKING:
    from pipeprof.machine_limits import MachineLimits

RECORD_GLOB = "overrides-*.jsonl"

# The DataLoader arguments a literal can set, and what each accepts (the rest take objects: a dataset, a
# sampler, a function, a generator).
_BOOL = "True or False"
ALLOWED: dict[str, str] = {
    "batch_size": "a whole number >= 1",
    "num_workers": "a whole number >= 0",
    "prefetch_factor": "a whole number >= 1, or None",
    "pin_memory": _BOOL,
    "persistent_workers": _BOOL,
    "drop_last": _BOOL,
    "timeout": "a number of seconds >= 0",
    "multiprocessing_context": "fork, spawn, forkserver or None",
    "pin_memory_device": "a device name such as cuda:0, or ''",
    "in_order": _BOOL,
}
_CONTEXTS = ("fork", "spawn", "forkserver")
# Set through object.__setattr__: DataLoader.__setattr__ refuses them after construction.
_REFUSED = ("batch_size", "drop_last", "persistent_workers")
_EVAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "evaluate", "test", "testing"})


@dataclass(frozen=True)
class LoaderOverride:
    """One ``--loader [NAME.]KEY=VALUE``: ``loader`` None means the training loader."""

    loader: str | None
    key: str
    value: Any

    def text(self) -> str:
        """As ``--loader`` takes it: ``[NAME.]KEY=VALUE``."""
        return f"{self.loader + '.' if self.loader else ''}{self.key}={self.value!r}"


@dataclass(frozen=True)
class Overrides:
    """What ``pipeprof profile`` was asked to change in the script, from outside."""

    loader: tuple[LoaderOverride, ...] = ()
    threads: int | None = None

    def __bool__(self) -> bool:
        return bool(self.loader) or self.threads is not None

    def to_json(self) -> dict[str, Any]:
        """run.json's ``overrides`` (the request; what was applied is added by the session)."""
        return {"loader": [{"loader": o.loader, "key": o.key, "value": o.value} for o in self.loader],
                "threads": self.threads}

    @classmethod
    def from_json(cls, data: Any) -> Overrides:
        data = data if isinstance(data, dict) else {}
        items = tuple(LoaderOverride(o.get("loader"), str(o["key"]), o.get("value"))
                      for o in data.get("loader") or [] if isinstance(o, dict) and "key" in o)
        threads = data.get("threads")
        return cls(items, int(threads) if threads is not None else None)

    def flags(self) -> list[str]:
        """The same request as ``pipeprof profile`` flags (a child run's command line)."""
        words = [word for o in self.loader for word in ("--loader", o.text())]
        if self.threads is not None:
            words += ["--threads", str(self.threads)]
        return words


# --- the parent: parse and check ------------------------------------------------------------------

def parse(loader_flags: list[str] | None, threads: int | None) -> Overrides:
    """The ``--loader`` flags' values (``[NAME.]KEY=VALUE``) and ``--threads``, checked; ``UsageError`` names the
    first bad one."""
    items = tuple(parse_one(text) for text in loader_flags or [])
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"pipeprof profile: --threads {threads!r}: expected a whole number >= 1")
    _check_repeats(items, loader_flags or [])
    from pipeprof import machine_limits  # the parent's check only: the hooked process never reaches it

    _check_machine(items, threads, machine_limits.current())
    for name in {o.loader for o in items}:
        mine = {o.key: o.value for o in items if o.loader == name}
        if mine.get("num_workers") == 0:
            clash = [k for k in ("prefetch_factor", "persistent_workers") if mine.get(k) not in (None, False)]
            if clash:
                raise UsageError(f"pipeprof profile: --loader num_workers=0 with {clash[0]}={mine[clash[0]]!r}: "
                                 f"{clash[0]} needs worker processes (num_workers >= 1)")
    return Overrides(items, threads)


def _check_repeats(items: tuple[LoaderOverride, ...], texts: list[str]) -> None:
    """One value a key and loader: a second ``--loader`` of the same key would otherwise silently win."""
    first: dict[tuple[str | None, str], str] = {}
    for item, text in zip(items, texts):
        if (item.loader, item.key) in first:
            raise UsageError(f"pipeprof profile: --loader {text!r}: {item.key} is already set by --loader "
                             f"{first[(item.loader, item.key)]!r}; give each key once")
        first[(item.loader, item.key)] = text


def _check_machine(items: tuple[LoaderOverride, ...], threads: int | None, limits: MachineLimits) -> None:
    """Worker processes and threads this machine can start (``machine_limits``)."""
    most = limits.most_workers()
    for item in items:
        if item.key == "num_workers" and item.value > most:
            raise UsageError(f"pipeprof profile: --loader {item.text()}: num_workers must be 0 to {most} on this "
                             f"machine ({limits.where()})")
    if threads is not None and threads > most:
        raise UsageError(f"pipeprof profile: --threads {threads}: expected 1 to {most} on this machine "
                         f"({limits.where()})")


def parse_one(text: str) -> LoaderOverride:
    """``[NAME.]KEY=VALUE`` -> a checked ``LoaderOverride``."""
    target, eq, raw = text.partition("=")
    if not eq or not target.strip():
        raise UsageError(f"pipeprof profile: --loader {text!r}: expected KEY=VALUE or NAME.KEY=VALUE "
                         "(e.g. num_workers=2, train_loader.pin_memory=True)")
    name, _, key = target.strip().rpartition(".")
    key = key.strip()
    if key not in ALLOWED and not is_dataloader_argument(key):  # torch imported only to word a refusal
        raise UsageError(f"pipeprof profile: --loader {text!r}: {key!r} is not an argument of "
                         f"torch.utils.data.DataLoader; expected one of {', '.join(ALLOWED)}")
    if key not in ALLOWED:
        raise UsageError(f"pipeprof profile: --loader {text!r}: {key} takes an object, which cannot be set from "
                         f"outside; expected one of {', '.join(ALLOWED)}")
    value = _value(key, raw.strip())
    if value is _BAD:
        raise UsageError(f"pipeprof profile: --loader {text!r}: {key} must be {ALLOWED[key]}, got {raw.strip()!r}")
    return LoaderOverride(name or None, key, value)


def is_dataloader_argument(key: str) -> bool:
    """Whether ``key`` is a parameter of this torch's ``DataLoader.__init__`` (imports torch)."""
    import inspect

    from torch.utils.data import DataLoader
    return key in inspect.signature(DataLoader.__init__).parameters and key != "self"


_BAD = object()


def _value(key: str, raw: str) -> Any:
    """``raw`` as the value ``key`` takes, or ``_BAD``."""
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = raw if key in ("multiprocessing_context", "pin_memory_device") else _BAD
    if value is _BAD:
        return _BAD
    whole = isinstance(value, int) and not isinstance(value, bool)
    if key == "batch_size":
        return value if whole and value >= 1 else _BAD
    if key == "num_workers":
        return value if whole and value >= 0 else _BAD
    if key == "prefetch_factor":
        return value if value is None or (whole and value >= 1) else _BAD
    if key == "timeout":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        return value if ok else _BAD
    if key == "multiprocessing_context":
        return value if value is None or value in _CONTEXTS else _BAD
    if key == "pin_memory_device":
        return value if isinstance(value, str) else _BAD
    return value if isinstance(value, bool) else _BAD


# --- the hooked process: apply ----------------------------------------------------------------------

def from_environment(text: str | None) -> Overrides:
    """The request as the environment carries it (``PIPEPROF_OVERRIDES``); none when unset or unreadable."""
    if not text:
        return Overrides()
    try:
        return Overrides.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError):
        return Overrides()


def record_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"overrides-{pid}.jsonl")


class Applier:
    """The overrides of one hooked process: threads at ``arm``, loaders at their first ``iter()``."""

    def __init__(self, overrides: Overrides, record: str | None, pid: int | None = None) -> None:
        self.overrides = overrides
        self.record = record
        self.pid = os.getpid() if pid is None else pid
        self.seen: weakref.WeakSet[Any] = weakref.WeakSet()  # not kept alive: a loader rebuilt per epoch goes

    def write(self, entry: dict[str, Any]) -> None:
        if self.record is None or os.getpid() != self.pid:
            return
        with open(self.record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": self.pid, **entry}, default=repr) + "\n")

    def on_first_iter(self, loader: Any) -> None:
        """Apply what is meant for ``loader`` (called at each ``iter()``; acts at the first)."""
        if loader in self.seen:
            return
        self.seen.add(loader)
        from pipeprof.script.loader_names import loader_name
        name = loader_name(loader)
        wanted = self.meant_for(loader, name)
        if not wanted:
            return
        entry = apply_settings(loader, wanted)
        self.write({"kind": "loader", "name": name, **entry})

    def meant_for(self, loader: Any, name: str) -> dict[str, Any]:
        """The settings for ``loader`` named ``name``: the training loader's, then those for its name."""
        out: dict[str, Any] = {}
        if any(o.loader is None for o in self.overrides.loader) and looks_like_training(name):
            out.update({o.key: o.value for o in self.overrides.loader if o.loader is None})
        out.update({o.key: o.value for o in self.overrides.loader if o.loader is not None and names_match(o.loader, name)})
        return out


def names_match(asked: str, name: str) -> bool:
    """``train_loader`` matches ``train_loader`` and ``self.train_loader`` (the last dotted part)."""
    return asked == name or asked == name.rsplit(".", 1)[-1]


def looks_like_training(name: str, grad_enabled: bool | None = None) -> bool:
    """Whether a loader iterated now, named ``name``, looks like the training loader (see the module)."""
    import torch
    if grad_enabled is None:
        grad_enabled = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    words = {w for w in re.split(r"[^a-z]+", name.lower()) if w}
    return grad_enabled and not words & _EVAL_WORDS


def current_settings(loader: Any) -> dict[str, Any]:
    return {key: getattr(loader, key, None) for key in ALLOWED}


def apply_settings(loader: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """Set ``wanted`` on ``loader`` (not yet iterated); ``{set, script, dropped, not_applied}``: what it runs
    with now, what the script had, worker-only settings dropped (0 workers) and keys that could not be set."""
    from torch.utils.data import BatchSampler

    before = current_settings(loader)
    target = {**before, **wanted}
    not_applied: dict[str, str] = {}
    if ("batch_size" in wanted or "drop_last" in wanted) and loader.batch_size is None:
        for key in ("batch_size", "drop_last"):
            if key in wanted:
                not_applied[key] = "the loader takes its batches from its own batch_sampler"
                target[key] = before[key]
    dropped = []
    if not target["num_workers"]:
        for key, unset in (("prefetch_factor", None), ("persistent_workers", False)):
            if target[key] not in (None, False):
                dropped.append(key)
            target[key] = unset
    elif target["prefetch_factor"] is None:
        target["prefetch_factor"] = DEFAULT_PREFETCH_FACTOR  # what DataLoader.__init__ gives workers
    for key, value in target.items():
        if value == before[key] and type(value) is type(before[key]):
            continue
        if key in _REFUSED:
            object.__setattr__(loader, key, value)
        else:
            setattr(loader, key, value)
    if target["batch_size"] != before["batch_size"] or target["drop_last"] != before["drop_last"]:
        object.__setattr__(loader, "batch_sampler", BatchSampler(loader.sampler, target["batch_size"],
                                                                 target["drop_last"]))
    changed = {k: target[k] for k in target if target[k] != before[k]}
    return {"set": {k: v for k, v in wanted.items() if k not in not_applied},
            "changed": changed, "script": {k: before[k] for k in changed}, "dropped": dropped,
            "not_applied": not_applied}


def arm(hooks: Any, overrides: Overrides, record: str | None) -> Applier | None:
    """Apply ``overrides`` in this process, through ``hooks.patches`` (taken back with the hooks)."""
    if not overrides:
        return None
    applier = Applier(overrides, record)
    if overrides.threads is not None:
        hold_threads(hooks, applier, overrides.threads)
    if overrides.loader:
        from torch.utils.data import DataLoader

        from pipeprof.script.patches import wraps

        def make(original: Callable) -> Callable:
            def __iter__(self: Any) -> Any:
                if hooks.live:
                    applier.on_first_iter(self)
                return original(self)
            return wraps(__iter__, original)
        hooks.patches.apply(DataLoader, "__iter__", make)
    return applier


def hold_threads(hooks: Any, applier: Applier, threads: int) -> None:
    """``torch.set_num_threads(threads)`` now, and the script's own calls recorded, not obeyed (this process
    only: a DataLoader worker sets its own 1)."""
    import torch

    from pipeprof.script.patches import wraps
    had = torch.get_num_threads()
    torch.set_num_threads(threads)
    applier.write({"kind": "threads", "set": threads, "script": had})
    pid = applier.pid

    def make(original: Callable) -> Callable:
        def set_num_threads(n: int) -> None:
            caller = sys._getframe(1).f_globals.get("__name__") or ""
            if not hooks.live or os.getpid() != pid or caller.startswith("torch."):
                return original(n)  # torch's own call: a DataLoader worker's 1 thread (forked or spawned)
            applier.write({"kind": "threads_asked", "asked": n, "kept": threads})
            return None
        return wraps(set_num_threads, original)
    hooks.patches.apply(torch, "set_num_threads", make)


# --- the session: read back -------------------------------------------------------------------------

def read_records(folder: Path | None) -> list[dict[str, Any]]:
    """Every process's applied overrides (``overrides-<pid>.jsonl``), in pid order then as written."""
    if folder is None:
        return []
    out = []
    for path in sorted(Path(folder).glob(RECORD_GLOB)):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                out.append(entry)
    return out


def outcome(request: dict[str, Any], records: list[dict[str, Any]], loaders: list[dict[str, Any]],
            pid: int | None) -> tuple[dict[str, Any], list[str]]:
    """run.json's ``overrides`` (the request, plus ``applied`` per loader and ``threads_applied``) and the notes
    to add: one line per applied loader ("overridden: ..."), a name never iterated, an override that reached
    an evaluation loader. ``loaders``: the run's loaders (their roles); ``pid``: the process they are of."""
    applied = [r for r in records if r.get("kind") == "loader"]
    threads = [r for r in records if r.get("kind") == "threads"]  # one per process: the first one's is said
    asked = [r.get("asked") for r in records if r.get("kind") == "threads_asked"
             and r.get("pid") == (threads[0].get("pid") if threads else None)]
    out = {**request, "applied": applied,
           "threads_applied": ({"set": threads[0].get("set"), "script": threads[0].get("script"),
                                "script_asked": asked} if threads else None)}
    notes = []
    for r in applied:
        said = " ".join(f"{k}={v!r} (script: {r['script'].get(k)!r})" for k, v in r.get("changed", {}).items())
        extra = "".join(f"; {k} not applied: {why}" for k, why in (r.get("not_applied") or {}).items())
        drop = f"; dropped {', '.join(r['dropped'])} (0 workers)" if r.get("dropped") else ""
        notes.append(f"overridden: {r.get('name')} {said or 'no change (already so)'}{drop}{extra}")
    if threads:
        t = threads[0]
        kept = f"; the script's own torch.set_num_threads({', '.join(map(str, asked))}) kept at {t.get('set')}" \
            if asked else ""
        notes.append(f"overridden: torch threads {t.get('set')} (script: {t.get('script')}){kept}")
    seen = [str(lo.get("name")) for lo in loaders]
    applied_to = seen + [str(r.get("name")) for r in applied]  # another rank's loader, too
    for asked_name in sorted({str(o["loader"]) for o in request.get("loader", []) if o.get("loader")}):
        if not any(names_match(asked_name, n) for n in applied_to):
            notes.append(f"--loader {asked_name}.*: the script never iterated a loader named {asked_name!r} "
                         f"(loaders: {', '.join(seen) or 'none'}); nothing was changed for it")
    if any(o.get("loader") is None for o in request.get("loader", [])):
        mine = [r for r in applied if pid is None or r.get("pid") == pid]
        train = [lo for lo in loaders if lo.get("role") == "train"]
        if not applied:
            notes.append("--loader KEY=VALUE: no loader looked like the training loader at its first iter(); "
                         "nothing was changed (name one: --loader NAME.KEY=VALUE)")
        elif train and mine and not any(r.get("name") == lo.get("name") for r in mine for lo in train):
            notes.append(f"--loader KEY=VALUE went to {', '.join(sorted({str(r.get('name')) for r in mine}))}, "
                         f"but the training loader was {train[0].get('name')}: name it with "
                         f"--loader {train[0].get('name')}.KEY=VALUE")
    return out, notes
