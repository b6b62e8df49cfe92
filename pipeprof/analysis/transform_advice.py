"""What the measured transforms and decode calls suggest (issue 18, item 4): the rules, the per-sample time each
change saves, and its reasons (worded by ``render.advice_text``); ``recommend`` turns a saving into a prediction
with its model.

Pure functions over one loader's ``LoaderTransforms`` (``analysis.transforms``). Three changes, each only where
its rule holds; each is a code change (no scenario setting expresses it, so ``--verify`` cannot re-run it) but
for the decoded cache in RAM of a scenario's images, which ``data.storage = "ram"`` is (``recommend``):

* **cache after a deterministic prefix** (``cache_point``): one deterministic transform (``random is False``)
  takes at least ``SHARE_DOMINATES`` of the transforms' time, every transform before it is deterministic too,
  and a random one follows. Its output is the same every epoch, so it can be computed once: the saving per
  sample is the prefix's measured wall time (it included) plus the decode's, which comes before the transforms.
* **decode once into RAM** (``decode_saving``): the decode calls take at least ``SHARE_DOMINATES`` of a
  sample's making (the ``split``'s parts together): the saving is the measured decode and the fetch before it.
* **torchvision.io.decode_jpeg instead of PIL** (``jpeg_saving``): decode dominates as above and is PIL's
  (``how`` names ``PIL``): the saving is ``1 - DECODE_JPEG_KEEPS`` of the measured decode — an estimate, not a
  measurement of this run (see the constant for what it rests on).

``costliest`` names the part of preparation that costs the most (the verdict's words, ``verdict.with_transforms``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import SHARE_DOMINATES
from pipeprof.analysis.transforms import LoaderTransforms, TransformCost

# torchvision.io.decode_jpeg's time over PIL's Image.open + convert("RGB") for the same JPEG: measured once on
# this project's 2-core machine (torchvision 0.29, Pillow 13, one thread, best of 5 x 200 decodes of a quality-90
# JPEG held in memory): 0.66 at 500x375 px, 0.62 at 256x256, 0.48 at 64x64. The larger images' 0.65 is assumed
# for any JPEG; the PIL -> tensor conversion that decode_jpeg also avoids is not counted (a conservative side).
# (render.prediction_text.DECODE_JPEG_BASIS says so with every estimate made from it.)
DECODE_JPEG_KEEPS = 0.65

# A part's time on the CPU this far below its wall time is said beside it ("... 988 µs per sample (580 µs of it on
# the CPU)"): under contention a transform's wall time holds its waits for a core, which prep's does not.
WAITED_NOTABLE = 0.2

# The code changes of decoding once into RAM and of decode_jpeg, and their risks (also said for sampled shares:
# analysis.sampled_advice).
DECODE_IN_RAM_CODE = Reason("decode_in_ram_code")
DECODE_IN_RAM_NOTE = Reason("decode_in_ram_risk")
DECODE_JPEG_CODE = Reason("decode_jpeg_code")
DECODE_JPEG_NOTE = Reason("decode_jpeg_risk")

CACHE_AFTER = "cache_after"
DECODE_IN_RAM = "decode_in_ram"
DECODE_JPEG = "decode_jpeg"


@dataclass(frozen=True)
class Costliest:
    """The costliest part of preparing a sample: a transform, or the decode calls (``name`` is then "decoding
    (<how>)"); ``share_of_prep`` None where the preparation time is not known."""

    name: str
    per_sample_s: float
    share_of_prep: float | None
    decode: bool
    cpu_per_sample_s: float | None = None  # its time on the CPU (the rest: waiting, for a core among others)


@dataclass(frozen=True)
class PrepSaving:
    """A change to a loader's transforms or decode, and the seconds per sample it saves (measured, or estimated
    where ``assumed`` says on what): ``prep_saved_s`` from the sample's CPU preparation, ``fetch_saved_s`` from
    reading it. ``why`` is the measured basis; ``note`` the risk, where the change might not help (``Reason``s,
    worded by ``render.advice_text``; ``assumed`` by ``render.prediction_text``)."""

    kind: str  # CACHE_AFTER, DECODE_IN_RAM or DECODE_JPEG
    prep_saved_s: float
    fetch_saved_s: float
    code_change: Reason
    why: Reason
    assumed: Reason | None = None
    note: Reason | None = None


def prep_per_sample_s(lt: LoaderTransforms) -> float | None:
    """The samples' preparation time per sample that ``share_of_prep`` is taken of (a transform's wall over its
    share), else the split's decode + transform + other; None where neither is known."""
    for cost in lt.transforms:
        if cost.share_of_prep and cost.share_of_prep > 0:
            return cost.per_sample_s / cost.share_of_prep
    split = lt.split
    if split is None:
        return None
    total = split.decode_s + split.transform_s + split.other_s
    return total if total > 0 else None


def costliest(lt: LoaderTransforms | None) -> Costliest | None:
    """The costliest transform, or the decode calls where they cost more than it; None where nothing was timed."""
    if lt is None:
        return None
    top = lt.transforms[0] if lt.transforms else None
    decode = lt.decode
    if decode is not None and decode.per_sample_s > 0 and (top is None or decode.per_sample_s > top.per_sample_s):
        prep = prep_per_sample_s(lt)
        return Costliest(f"decoding ({decode.how})" if decode.how else "decoding", decode.per_sample_s,
                         decode.per_sample_s / prep if prep else None, True, decode.cpu_per_sample_s)
    if top is None or top.per_sample_s <= 0:
        return None
    return Costliest(top.name, top.per_sample_s, top.share_of_prep, False, top.cpu_per_sample_s)


def cache_point(lt: LoaderTransforms) -> tuple[TransformCost, tuple[TransformCost, ...]] | None:
    """The dominant deterministic transform and the deterministic prefix that holds it (call order: every
    transform up to the first one not known to be deterministic, so the cheap deterministic ones after the
    dominant one, a crop, are cached too), where a random transform follows; None where the module
    docstring's rule does not hold."""
    total = sum(c.per_sample_s for c in lt.transforms)
    if total <= 0:
        return None
    top = max(lt.transforms, key=lambda c: c.per_sample_s)
    if top.random is not False or top.per_sample_s / total < SHARE_DOMINATES:
        return None
    in_order = sorted(lt.transforms, key=lambda c: c.order)
    first = next((i for i, c in enumerate(in_order) if c.random is not False), len(in_order))
    prefix, after = tuple(in_order[:first]), in_order[first:]
    if top not in prefix or not any(c.random is True for c in after):
        return None
    return top, prefix


def sample_s(lt: LoaderTransforms) -> float | None:
    """A sample's making, seconds: the split's parts together (None without a split)."""
    split = lt.split
    if split is None:
        return None
    total = split.fetch_s + (split.core_wait_s or 0.0) + split.decode_s + split.transform_s + split.other_s
    return total if total > 0 else None


def decode_share(lt: LoaderTransforms) -> float | None:
    """The decode calls' share of a sample's making (None: no decode or no split)."""
    total = sample_s(lt)
    if lt.decode is None or total is None:
        return None
    return lt.decode.per_sample_s / total


def decode_reason(lt: LoaderTransforms) -> Reason | None:
    """The measured decode (kind ``decode_measured``: "decoding (PIL.Image.open+convert) measured at 64% of a
    sample's making, 2.10 ms per sample"); None where no decode was timed."""
    decode = lt.decode
    if decode is None:
        return None
    return Reason("decode_measured", {"how": decode.how, "share": decode_share(lt),
                                      "per_sample_s": decode.per_sample_s})


def prep_savings(lt: LoaderTransforms | None) -> list[PrepSaving]:
    """Every change of the module docstring whose rule holds for ``lt`` (none without transforms measured)."""
    if lt is None:
        return []
    out = [s for s in (_cache_after(lt), decode_saving(lt), jpeg_saving(lt)) if s is not None]
    return out


def _cache_after(lt: LoaderTransforms) -> PrepSaving | None:
    point = cache_point(lt)
    if point is None:
        return None
    top, prefix = point
    last = prefix[-1]
    total = sum(c.per_sample_s for c in lt.transforms)
    prefix_s = sum(c.per_sample_s for c in prefix)
    decode_s = lt.decode.per_sample_s if lt.decode is not None else 0.0
    rest = [c for c in sorted(lt.transforms, key=lambda c: c.order) if c.order > last.order]
    first_random = next(c for c in rest if c.random)
    why = Reason(CACHE_AFTER, {"top": top.name, "top_share": top.per_sample_s / total, "top_s": top.per_sample_s,
                               "prefix": tuple(c.name for c in prefix), "first_random": first_random.name,
                               "last": last.name, "prefix_s": prefix_s, "decode_s": decode_s})
    return PrepSaving(CACHE_AFTER, prefix_s + decode_s, 0.0,
                      Reason("cache_after_code", {"last": last.name, "prefix": tuple(c.name for c in prefix),
                                                  "rest": tuple(c.name for c in rest)}),
                      why, note=Reason("cache_after_risk", {"last": last.name}))


def decode_saving(lt: LoaderTransforms) -> PrepSaving | None:
    """Decode once into RAM, where decoding dominates a sample's making: the decode and the fetch before it saved."""
    share = decode_share(lt)
    if lt.decode is None or share is None or share < SHARE_DOMINATES:
        return None
    fetch_s = lt.split.fetch_s if lt.split is not None else 0.0
    return PrepSaving(DECODE_IN_RAM, lt.decode.per_sample_s, fetch_s,
                      DECODE_IN_RAM_CODE, Reason(DECODE_IN_RAM, {"decode": decode_reason(lt)}),
                      note=DECODE_IN_RAM_NOTE)


def jpeg_saving(lt: LoaderTransforms) -> PrepSaving | None:
    """torchvision.io.decode_jpeg instead of PIL, where PIL's decode dominates a sample's making (an estimate)."""
    share = decode_share(lt)
    decode = lt.decode
    if decode is None or share is None or share < SHARE_DOMINATES or "PIL" not in decode.how:
        return None
    saved = decode.per_sample_s * (1 - DECODE_JPEG_KEEPS)
    return PrepSaving(DECODE_JPEG, saved, 0.0,
                      DECODE_JPEG_CODE,
                      Reason(DECODE_JPEG, {"decode": decode_reason(lt), "keeps": DECODE_JPEG_KEEPS, "saved": saved}),
                      assumed=Reason("decode_jpeg_assumed", {"keeps": DECODE_JPEG_KEEPS}),
                      note=DECODE_JPEG_NOTE)
