"""Property-based tests: bad configuration is refused with ONE line, never a traceback or a hang.

Scenario files (``load_scenario``), ``--set`` overrides, sweep grids
(``pipeprof.grid``) and the CLI are fed random input built from the real
schema (``pipeprof.scenario.SCHEMA``) mixed with unknown keys and every TOML
type. The outcome is always a valid result or a ``UsageError`` whose message
is a single printable line (no newline, no raw control character that could
move the cursor or recolour the terminal). Configuration is data: nothing in
it is executed or expanded.

Hypothesis runs derandomized (same examples on every run, no example
database written); the whole file takes well under a minute on 2 cores.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pipeprof import scenario as scen
from pipeprof.errors import UsageError
from pipeprof.grid import MAX_POINTS, axes_from_table, build_axes, parse_axis, plan, read_sweep_table
from pipeprof.scenario import SCHEMA, SECTION_TYPES, Scenario, load_scenario, parse_override, scenario_from_dict
from pipeprof.variants import scenario_dict, to_toml

ROOT = Path(__file__).parent.parent
QUICK = ROOT / "scenarios" / "quick.toml"
QUICK_RAW = tomllib.loads(QUICK.read_text(encoding="utf-8"))
BASE = load_scenario(QUICK)


def fuzz(n: int):
    """Hypothesis settings for this file: deterministic, no example database, no per-example deadline."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


def assert_one_line(message: str) -> None:
    assert message.strip(), "an empty error message"
    assert len(message.splitlines()) == 1, f"a multi-line message: {message!r}"
    assert message.isprintable(), f"a raw control character in the message: {message!r}"


def outcome(fn, *args, **kwargs) -> Any:
    """``fn``'s result, or the UsageError (checked to be one line); any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except UsageError as e:
        assert_one_line(str(e))
        return e


def check_scenario(s: Scenario) -> None:
    """What every accepted scenario satisfies: countable steps, and it survives being written back as TOML."""
    assert isinstance(s, Scenario)
    assert s.name.strip()
    assert s.total_steps() > s.train.warmup_steps >= 0
    assert (s.train.steps is None) != (s.train.epochs is None)
    text = to_toml(scenario_dict(s))
    assert scenario_from_dict(tomllib.loads(text), "round trip") == s


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# ---- strategies ---------------------------------------------------------------------------------

WORDS = sorted({*scen.STORAGE_KINDS, *scen.TRANSFORMS, *scen.IMAGE_FORMATS, *scen.ACTIVATIONS, *scen.INITS,
                *scen.IMPLEMENTATIONS, *scen.THROTTLE_PRESETS, "warm", "cold", "auto", "cpu", "cuda", "cuda:0",
                "cuda:1", "cuda:²", "cuda:٣", "cuda:01", "cuda:128", "cuda:99999999999999999999", "cuda:-1"})
KNOWN_KEYS = sorted({k for keys in SCHEMA.values() for k in keys})
DOTTED_KEYS = [f"{s}.{k}" if s else k for s, keys in SCHEMA.items() for k in keys]
ODD_KEYS = ["", " ", "sweep", "a.b", "\n", "name\n", "lr\r", "\x1b[31mred", "\u2028", "\x00", "\t", "é", "𝔘",
            "x" * 500, "=", "[data]", "data.storage"]
ODD_TEXT = ["", " ", "\n", "\r\n", "\x00", "\x1b[2J", "\u2028", "\x85", "\ufeff", "é", "𝔘nicode", "'", '"', "\\",
            '"""', "'''"]

keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.sampled_from(ODD_KEYS), st.text(max_size=12))
ints = st.one_of(st.integers(-3, 300), st.integers(),
                 st.integers(-(2**63), 2**63 - 1),
                 st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**100, -(10**300)]),
                 st.just(4000).map(lambda n: 10**n))
floats = st.one_of(st.floats(), st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e308,
                                                  -1e308, 5e-324, 0.999999, 1.0, 1000.0, 1000.0001]))
# Long values are built by .map(): inside sampled_from they would bloat every strategy's repr.
long_text = st.sampled_from([1000, 100_000]).map(lambda n: "x" * n)
texts = st.one_of(st.sampled_from(WORDS), st.sampled_from(ODD_TEXT), long_text, st.text(max_size=20),
                  st.text(st.characters(max_codepoint=0x9F), max_size=10))  # control characters
offsets = st.integers(-23 * 60, 23 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))  # TOML: whole minutes
moments = st.one_of(st.datetimes(), st.datetimes(timezones=st.just(dt.timezone.utc)), st.datetimes(timezones=offsets),
                    st.dates(), st.times())
scalars = st.one_of(ints, floats, texts, st.booleans(), moments)
toml_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner,
                                                                                              max_size=4),
                           max_leaves=12)


def deep_list(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_table(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


deep = st.integers(1, 3000).flatmap(lambda n: st.sampled_from([deep_list(n), deep_table(n), [deep_table(n)]]))


def near(rule: scen.Rule) -> st.SearchStrategy:
    """Values near what the rule accepts: often accepted, often just outside (so validation gets past the type)."""
    if rule.kind == "str":
        words = [w for w in WORDS if rule.check(w)]
        return st.one_of(st.sampled_from(words), texts) if words else texts
    return {
        "int": st.one_of(st.integers(-2, 300), st.integers(-2, 300), ints),
        "float": st.one_of(st.floats(-2, 1001), st.integers(-2, 1001), floats),
        "bool": st.booleans(),
        "int-list": st.lists(st.one_of(st.integers(-1, 600), st.integers(-1, 600), ints), max_size=4),
        "throttle": st.one_of(st.sampled_from([*scen.THROTTLE_PRESETS, "ssd", ""]),
                              st.dictionaries(st.sampled_from(["latency_ms", "bandwidth_mb_s", "x"]),
                                              st.one_of(st.floats(-1, 1e4), floats, ints, texts), max_size=3)),
    }[rule.kind]


def rule_of(dotted: str) -> scen.Rule:
    section, _, key = dotted.rpartition(".")
    return SCHEMA[section][key]


def plausible(rule: scen.Rule) -> st.SearchStrategy:
    """Mostly ``near`` values, and sometimes anything at all (deep nesting included)."""
    return st.one_of(near(rule), near(rule), near(rule), toml_values, deep)


@st.composite
def documents(draw) -> dict[str, Any]:
    """A scenario-shaped dict: often quick.toml's, then changed key by key (real keys, unknown keys, odd values)."""
    doc = copy.deepcopy(QUICK_RAW) if draw(st.booleans()) else {}
    for _ in range(draw(st.integers(0, 6))):
        section = draw(st.sampled_from(["", *SECTION_TYPES, *SECTION_TYPES, "sweep", "extra"]))
        if section and draw(st.integers(0, 15)) == 0:
            doc[section] = draw(toml_values)  # a section that is not a table (or an odd one)
            continue
        target = doc if not section else doc.setdefault(section, {})
        if not isinstance(target, dict):
            continue
        rules = SCHEMA.get(section, {})
        if rules and draw(st.integers(0, 7)):
            key = draw(st.sampled_from(sorted(rules)))
            target[key] = draw(plausible(rules[key]))
        else:
            target[draw(keys)] = draw(toml_values)
    for section in ("train", "loader"):  # a few removals: steps and epochs both or neither, defaults
        if isinstance(doc.get(section), dict) and doc[section] and draw(st.integers(0, 4)) == 0:
            doc[section].pop(draw(st.sampled_from(sorted(doc[section]))))
    return doc


def dump(doc: dict[str, Any]) -> str:
    try:
        return tomli_w.dumps(doc)
    except (TypeError, ValueError, RecursionError):  # what TOML (or tomli_w) cannot write: skip it
        assume(False)
        raise AssertionError("unreachable") from None


# ---- 1. random TOML documents --------------------------------------------------------------------


@fuzz(400)
@given(doc=documents())
@example(doc={"name\n": 1})  # a key with a newline, named in the error message
@example(doc={"data": {"\x1b[31mstorage": "ram"}})  # a terminal escape in a key
@example(doc={**QUICK_RAW, "data": {"storage": "ram", "throttle": {"latency_ms\n": 1}}})
@example(doc={**QUICK_RAW, "train": {"epochs": 1, "device": "cuda:²"}})  # torch.device() would raise
@example(doc={**QUICK_RAW, "train": {"epochs": 1, "device": "cuda:128"}})  # torch wraps it to cuda:-128
@example(doc={**QUICK_RAW, "train": {"epochs": 1, "device": "cuda:" + "9" * 5000}})  # int() of 5000 digits
@example(doc={**QUICK_RAW, "description": "a\nb\x00c" + "x" * 1000})
@example(doc={**QUICK_RAW, "train": {"epochs": 10**100}, "loader": {"batch_size": 2**63}})
def test_any_toml_document_loads_or_is_refused_with_one_line(workdir, doc):
    path = workdir / "doc.toml"
    path.write_text(dump(doc), encoding="utf-8")
    result = outcome(load_scenario, path)
    if isinstance(result, Scenario):
        check_scenario(result)


@fuzz(150)
@given(doc=documents())
def test_a_parsed_document_validates_or_is_refused_with_one_line(doc):
    """Straight into ``scenario_from_dict``: also what tomli_w cannot write (times with offsets, huge ints)."""
    result = outcome(scenario_from_dict, doc, "fuzz.toml")
    if isinstance(result, Scenario):
        check_scenario(result)


@fuzz(100)
@given(name=st.text(), description=st.text())
@example(name='x"\n[data]\nstorage = "device"', description="'''\n\"\"\"")
def test_any_name_and_description_are_kept_verbatim(workdir, name, description):
    """Free text stays text: it round-trips through the file and through ``to_toml`` (what child processes read)."""
    path = workdir / "text.toml"
    path.write_text(tomli_w.dumps({**QUICK_RAW, "name": name, "description": description}), encoding="utf-8")
    result = outcome(load_scenario, path)
    if name.strip():
        assert isinstance(result, Scenario)
        assert (result.name, result.description) == (name, description)
        check_scenario(result)
    else:
        assert isinstance(result, UsageError) and "name" in str(result)


# ---- 2. files that are not TOML, or not files ----------------------------------------------------

NOT_TOML = [b"", b"\xff\xfe\x00", b"\xc3\x28", b"name = 'x'\xff", b"[", b"[data", b"name = ", b"a = 1\na = 2",
            b"\x00" * 10, "\ufeffname = 'x'".encode(), b"x = 1" + b"\r" * 3, b"x = '\x1b[31m'",
            b"name = \"\\ud800\"", b"x = 1979-02-30", b"x = 1e999", b"x = 9223372036854775808"]
DEEP_TOML = [b"[" * 5000, b"v = " + b"[" * 5000, b"v = " + b"{a=" * 3000, b"v = " + b"1" * 5000,
             b"[data]\nsamples = -" + b"9" * 5000]
not_toml = st.one_of(st.sampled_from(NOT_TOML), st.integers(0, len(DEEP_TOML) - 1).map(DEEP_TOML.__getitem__))


@fuzz(300)
@given(content=st.one_of(st.binary(max_size=300), not_toml,
                         st.text(max_size=200).map(lambda t: t.encode("utf-8")),
                         st.lists(st.sampled_from(["[", "]", "{", "}", "=", "a", ".", '"', "'", "\n", "1", ",",
                                                   "[data]", "[[data]]", "samples", "inf", "nan", "#", " "]),
                                  max_size=60).map(lambda ps: "".join(ps).encode())))
@example(content=b"[" * 5000)  # tomllib: RecursionError
@example(content=b"v = " + b"1" * 5000)  # tomllib: ValueError (int() has a 4300-digit limit)
def test_any_bytes_as_a_scenario_file_load_or_are_refused_with_one_line(workdir, content):
    path = workdir / "bytes.toml"
    path.write_bytes(content)
    result = outcome(load_scenario, path)
    if isinstance(result, Scenario):
        check_scenario(result)


def test_a_directory_a_missing_file_and_odd_paths_are_refused_with_one_line(tmp_path):
    for path in (tmp_path, tmp_path / "missing.toml", tmp_path / "missing" / "x.toml", tmp_path / "a\nb.toml",
                 tmp_path / ("x" * 300 + ".toml"), Path("")):
        assert isinstance(outcome(load_scenario, path), UsageError)
    message = str(outcome(load_scenario, tmp_path / "a\x00b.toml"))
    assert "cannot read scenario file" in message and "\\x00" in message
    odd = tmp_path / "we\x1bird\nname.toml"
    odd.write_text("x = 1\n")
    message = str(outcome(load_scenario, odd))
    assert "unknown key x" in message


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.toml"
    path.write_text(QUICK.read_text() + "#" * (scen.MAX_SCENARIO_BYTES + 1) + "\n")
    message = str(outcome(load_scenario, path))
    assert "too large" in message


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_file_is_refused_instead_of_read_forever():
    """``pipeprof run /dev/zero`` used to read until memory ran out; a child with a memory cap checks it."""
    code = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from pipeprof.errors import UsageError
        from pipeprof.scenario import load_scenario
        try:
            load_scenario("/dev/zero")
        except UsageError as e:
            print(e)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "too large" in done.stdout and len(done.stdout.splitlines()) == 1


# ---- 3. --set overrides on quick.toml -------------------------------------------------------------

VALUE_TEXT = ["", " ", "[1,2", "[1,2]", "{a=1}", "{a=1", "1e999", "-1e999", "nan", "inf", "-0.0", '"unterminated',
              "'unterminated", '""', "''", "true", "True", "1_000", "0x10", "0o7", "0b1", "1979-05-27",
              "07:32:00", "1979-05-27T07:32:00Z", "[[1],[2]]", "[256,128]", "[256,-1]", "[]", "1 # comment",
              "1\n[loader]\nbatch_size = 3", '"x"\nname = "y"', "a=b", "=", "==",
              "\x00", "\x1b[31m", "\u2028", "ram", "memmap", "cuda:²", "cuda:128", "cuda:00"]
LONG_VALUES = ["1" * 5000, "[" * 5000, "{a=" * 3000, "9" * 400, "[" + "1," * 5000 + "]"]
long_values = st.integers(0, len(LONG_VALUES) - 1).map(LONG_VALUES.__getitem__)


def toml_text(value: Any) -> str:
    """``value`` as the TOML text of one value, on one line (what a user would type after ``--set key=``)."""
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_text(str(k))} = {toml_text(v)}" for k, v in value.items()) + "}"
    try:
        return tomli_w.dumps({"v": value})[4:].rstrip("\n")
    except (TypeError, ValueError):  # a time with an offset, an integer of more than 4300 digits
        return "1"


override_keys = st.one_of(
    st.sampled_from(DOTTED_KEYS), st.sampled_from(ODD_KEYS),
    st.lists(st.one_of(st.sampled_from(["data", "loader", "train", "model", "x", ""]), st.sampled_from(KNOWN_KEYS),
                       st.text(max_size=5)), min_size=1, max_size=6).map(".".join),
    st.text(max_size=15))
override_values = st.one_of(st.sampled_from(VALUE_TEXT), long_values, st.text(max_size=20), scalars.map(toml_text),
                            toml_values.map(toml_text))
# section.key=value with a value near what the key accepts: as TOML text, or as a bare word when it is a word
near_sets = st.sampled_from(DOTTED_KEYS).flatmap(lambda d: near(rule_of(d)).map(
    lambda v: f"{d}={v}" if isinstance(v, str) and v in WORDS else f"{d}={toml_text(v)}"))
overrides = st.one_of(
    st.builds(lambda k, sep, v: f"{k}{sep}{v}", override_keys, st.sampled_from(["=", "=", " = ", "==", ""]),
              override_values),
    near_sets, near_sets,
    st.text(max_size=30))


@fuzz(400)
@given(texts=st.lists(overrides, max_size=3))
@example(texts=["loader.batch_size=" + "1" * 5000])  # tomllib: ValueError
@example(texts=["model.hidden=" + "[" * 5000])  # tomllib: RecursionError
@example(texts=["loader.batch_size\n=2"])  # a newline in the echoed --set text
@example(texts=["\x1b[2Jname=x"])
@example(texts=["train.device=cuda:²"])
@example(texts=["train.device=cuda:" + "1" * 5000])
@example(texts=["a.b.c.d.e.f=1", "=1", "", "name", ".=1"])
def test_any_set_override_on_a_valid_scenario_loads_or_is_refused_with_one_line(texts):
    result = outcome(load_scenario, QUICK, texts)
    if isinstance(result, Scenario):
        check_scenario(result)


@fuzz(200)
@given(dotted=st.sampled_from(DOTTED_KEYS), data=st.data())
def test_a_set_override_means_the_same_as_the_key_in_the_file(dotted, data):
    """``--set section.key=TOML`` and the same key written in the file are accepted or refused alike."""
    section, _, key = dotted.rpartition(".")
    value = data.draw(plausible(SCHEMA[section][key]), label="value")
    try:
        text = toml_text(value)
        in_file = tomllib.loads(f"v = {text}")["v"]
    except (RecursionError, ValueError):  # nested too deeply to write or to read back: not this property's case
        assume(False)
    assume(text != "1" or value == 1)
    raw = copy.deepcopy(QUICK_RAW)
    (raw.setdefault(section, {}) if section else raw)[key] = in_file
    if section == "train" and key in ("steps", "epochs"):
        raw["train"].pop("epochs" if key == "steps" else "steps", None)
    from_set = outcome(load_scenario, QUICK, [f"{dotted}={text}"])
    from_file = outcome(scenario_from_dict, raw, str(QUICK))
    if isinstance(from_file, Scenario):
        assert from_set == from_file
    else:
        assert isinstance(from_set, UsageError)


@fuzz(200)
@given(text=st.one_of(overrides, st.text()))
@example(text="model.lr=0.1\n[loader]\nbatch_size = 3")
def test_parse_override_reads_one_value_or_refuses_with_one_line(text):
    result = outcome(parse_override, text)
    if not isinstance(result, UsageError):
        section, key, _ = result
        assert isinstance(section, str) and isinstance(key, str)


def test_text_after_a_set_value_is_not_dropped_silently():
    """``--set 'model.lr=0.1<newline>[loader]...'`` used to set lr = 0.1 and ignore the rest without a word."""
    text = "model.lr=0.1\n[loader]\nbatch_size = 3"
    assert parse_override(text)[2] == "0.1\n[loader]\nbatch_size = 3"
    message = str(outcome(load_scenario, QUICK, [text]))
    assert "model.lr = '0.1\\n[loader]\\nbatch_size = 3' is not allowed" in message
    assert isinstance(outcome(build_axes, [], [parse_axis("loader.num_workers=1\nname = 'x',2")], "s.toml"),
                      UsageError)


# ---- 4. sweep grids ------------------------------------------------------------------------------

grid_values = st.lists(st.one_of(st.sampled_from(VALUE_TEXT), long_values, st.text(max_size=8),
                                 scalars.map(toml_text), st.integers(-1, 4).map(str)), max_size=5).map(",".join)
SECTION_KEYS = [d for d in DOTTED_KEYS if "." in d]  # what a grid may vary (not name or description)
near_axes = st.sampled_from(SECTION_KEYS).flatmap(lambda d: st.lists(near(rule_of(d)), min_size=1, max_size=3)
                                                .map(lambda vs: (d, vs)))
grid_texts = st.one_of(
    st.builds(lambda k, sep, v: f"{k}{sep}{v}", override_keys, st.sampled_from(["=", "=", "", "=,"]), grid_values),
    near_axes.map(lambda axis: f"{axis[0]}=" + ",".join(toml_text(v) for v in axis[1])), st.text(max_size=40))


def nest(axes: list[tuple[str, list[Any]]]) -> dict[str, Any]:
    """Axes as a [sweep] table: {"loader": {"num_workers": [0, 1]}}."""
    table: dict[str, Any] = {}
    for dotted, values in axes:
        section, _, key = dotted.partition(".")
        table.setdefault(section, {})[key] = values
    return table


sweep_tables = st.one_of(
    st.lists(near_axes, min_size=1, max_size=3).map(nest), st.lists(near_axes, min_size=1, max_size=3).map(nest),
    toml_values,
    st.dictionaries(st.one_of(st.sampled_from(DOTTED_KEYS), keys),
                    st.one_of(st.lists(st.one_of(st.integers(-1, 4), st.sampled_from(WORDS), st.booleans(), scalars),
                                       max_size=4), toml_values), max_size=3),
    st.builds(lambda s, k, v: {s: {k: v}}, st.sampled_from([*SECTION_TYPES, "x"]), st.sampled_from(KNOWN_KEYS),
              st.lists(st.one_of(st.integers(-1, 4), st.sampled_from(WORDS), st.booleans()), max_size=4)))


def check_points(points, axes) -> None:
    total = 1
    for _, values in axes:
        total *= len(values)
    assert len(points) == total <= MAX_POINTS
    for point in points:
        assert (point.variant is None) != (point.skipped is None)
        if point.skipped is not None:
            assert_one_line(point.skipped)
        else:
            check_scenario(point.variant.scenario)


@fuzz(300)
@given(texts=st.lists(grid_texts, min_size=1, max_size=3))
@example(texts=["loader.num_workers=" + "1" * 5000])
@example(texts=["model.hidden=" + "[" * 5000])
@example(texts=["loader.num_workers\n=1,2"])
@example(texts=["train.device=cpu,cuda:²"])
@example(texts=["data.storage=ram,memmap,device", "loader.num_workers=0,1"])
def test_any_grid_axis_is_planned_or_refused_with_one_line(texts):
    """Each --grid text: parsed, checked and planned, or refused with one line."""
    axes = []
    for text in texts:
        axis = outcome(parse_axis, text)
        if isinstance(axis, UsageError):
            return
        key, values = axis
        assert isinstance(key, str) and values
        axes.append(axis)
    built = outcome(build_axes, [], axes, "quick.toml")
    if not isinstance(built, UsageError):
        check_points(outcome(plan, BASE, built, "quick.toml"), built)


@fuzz(300)
@given(table=sweep_tables, cli=st.lists(grid_texts, max_size=1))
@example(table={"loader\n": {"num_workers": [0, 1]}}, cli=[])
@example(table={"data": {"storage": ["ram", "device"]}, "loader": {"num_workers": [0, 2]}}, cli=[])
@example(table={"train": {"device": ["cuda:²"]}}, cli=[])
def test_any_sweep_table_is_planned_or_refused_with_one_line(table, cli):
    cli_axes = []
    for text in cli:
        axis = outcome(parse_axis, text)
        if isinstance(axis, UsageError):
            return
        cli_axes.append(axis)
    table_axes = outcome(axes_from_table, table, "quick.toml")
    if isinstance(table_axes, UsageError):
        return
    built = outcome(build_axes, table_axes, cli_axes, "quick.toml")
    if not isinstance(built, UsageError):  # planned like `pipeprof sweep` does: until steady, a step budget
        fixed = {"train.steady": True, "train.max_seconds": 30.0, "train.steps": 5000}
        check_points(outcome(plan, BASE, built, "quick.toml", fixed), built)


@fuzz(150)
@given(content=st.one_of(st.binary(max_size=200), not_toml,
                         sweep_tables.map(lambda t: dump({"sweep": t}).encode())))
@example(content=b"[sweep]\n" + b".".join([b"a"] * 3000) + b" = [1]\n")
def test_read_sweep_table_never_raises(workdir, content):
    path = workdir / "sweep.toml"
    path.write_bytes(content)
    table = read_sweep_table(path)
    outcome(axes_from_table, table, str(path))


def same(a: Any, b: Any) -> bool:
    return toml_text(a) == toml_text(b) and type(a) is type(b)  # nan == nan, -0.0 != 0.0


@fuzz(200)
@given(values=st.lists(st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(keys, scalars, max_size=2)),
                       min_size=1, max_size=4))
@example(values=['a",b'])  # a quote escaped inside a string ended the string for the comma split
@example(values=['\\', "x"])
def test_grid_values_written_as_toml_are_read_back_exactly(values):
    """``--grid KEY=V1,V2`` with each value written as TOML gives back exactly those values, in order."""
    text = ",".join(toml_text(v) for v in values)
    assume(all(toml_text(v) != "1" or v == 1 for v in values))
    key, parsed = parse_axis(f"loader.num_workers={text}")
    assert key == "loader.num_workers"
    assert len(parsed) == len(values) and all(same(a, b) for a, b in zip(parsed, values)), (parsed, values)


def test_a_huge_axis_is_refused_quickly():
    """An axis of 100,000 values used to be checked for repeats pairwise (minutes) before its size."""
    start = time.monotonic()
    for table in ({"loader": {"num_workers": list(range(100_000))}},
                  {"loader": {"num_workers": [0] * 100_000}}):
        message = str(outcome(build_axes, axes_from_table(table, "s.toml"), [], "s.toml"))
        assert str(MAX_POINTS) in message
    message = str(outcome(build_axes, [], [parse_axis("loader.num_workers=" + ",".join(["1"] * 50_000))], "s.toml"))
    assert str(MAX_POINTS) in message
    assert time.monotonic() - start < 10


def test_deeply_nested_values_are_refused_with_one_line(tmp_path):
    """Deep nesting (kept out of @example: Hypothesis's own printer recurses on it)."""
    hidden = [deep_table(2000)]  # str() of it recursed while the error message was built
    assert "model.hidden = [a table]" in str(outcome(scenario_from_dict, {**QUICK_RAW, "model": {"hidden": hidden}},
                                                     "s.toml"))
    dotted = ".".join(["a"] * 3000)
    path = tmp_path / "deep.toml"
    path.write_text(QUICK.read_text().replace("hidden = [512, 256]", f"hidden = [{{{dotted} = 1}}]"))
    assert "model.hidden = [a table]" in str(outcome(load_scenario, path))
    path.write_text(QUICK.read_text() + f"\n[sweep]\n{dotted} = [1]\n")  # flattening the table recursed
    table = read_sweep_table(path)
    assert table is not None
    message = str(outcome(build_axes, outcome(axes_from_table, table, str(path)), [], str(path)))
    assert "is not a scenario key" in message
    assert isinstance(outcome(axes_from_table, deep_table(3000, 1), "s.toml"), UsageError)
    for text in ("[" * 5000, "{a=" * 3000, "[" * 5000 + "]" * 5000):
        assert isinstance(outcome(load_scenario, QUICK, [f"model.hidden={text}"]), UsageError)
        assert isinstance(outcome(build_axes, [], [parse_axis(f"model.hidden={text}")], "s.toml"), UsageError)
    for value in (deep_list(3000), deep_table(3000), [deep_table(3000)], {"a": [deep_list(3000)]}):
        for dotted in DOTTED_KEYS:
            section, _, key = dotted.rpartition(".")
            raw = copy.deepcopy(QUICK_RAW)
            (raw.setdefault(section, {}) if section else raw)[key] = value
            assert isinstance(outcome(scenario_from_dict, raw, "s.toml"), UsageError)


def test_read_sweep_table_of_a_missing_or_odd_file_is_none(tmp_path):
    assert read_sweep_table(tmp_path / "missing.toml") is None
    assert read_sweep_table(tmp_path) is None


# ---- 5. the CLI: bad input is exit status 2 and one stderr line, before anything trains ------------


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly instead of training, should an input pass validation after all."""
    from pipeprof.pipeline import scenario_run, sweep

    def refuse(*args, **kwargs):
        raise AssertionError("validation passed: this input would have trained")

    for module, name in ((scenario_run, "build_workload"), (scenario_run, "cached_probe"), (sweep, "run_points"),
                         (sweep, "create_folder")):
        monkeypatch.setattr(module, name, refuse)


def run_cli(capsys, argv) -> str:
    from pipeprof.cli.main import main

    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeprof: error: "), captured.err
    assert_one_line(lines[0])
    return lines[0]


name_chars = "abcdefghijklmnopqrstuvwxyz_-0123456789"
unknown_sections = st.text(name_chars, max_size=8).map(lambda s: "x" + s).filter(lambda s: s not in SECTION_TYPES)
bad_sets = st.one_of(
    # an unknown section: refused whatever the key and value
    st.builds(lambda s, k, v: f"{s}.{k}={v}", unknown_sections, st.text(max_size=10).map(lambda k: k.replace("=", "")),
              override_values),
    # a known key, an impossible value
    st.integers(max_value=0).map(lambda n: f"loader.batch_size={n}"),
    st.integers(max_value=-1).map(lambda n: f"loader.num_workers={n}"),
    st.integers(min_value=101).map(lambda n: f"data.quality={n}"),
    st.one_of(floats, st.integers()).filter(lambda x: not 0 <= x < 1).map(lambda x: f"model.momentum={toml_text(x)}"),
    override_values.filter(lambda v: parse_override(f"data.storage={v}")[2] not in scen.STORAGE_KINDS)
    .map(lambda v: f"data.storage={v}"),
    # an unknown key in a known section
    st.builds(lambda s, k, v: f"{s}.{k}={v}", st.sampled_from(sorted(SECTION_TYPES)),
              st.text(name_chars, min_size=1, max_size=8).map(lambda k: "zz" + k), override_values),
    # no '=' at all
    st.text(max_size=20).map(lambda t: t.replace("=", "")),
)


@fuzz(60)
@given(sets=st.lists(bad_sets, min_size=1, max_size=2), good=st.lists(st.sampled_from(
    ["loader.batch_size=64", "train.steps=50", "data.storage=memmap", "name=x"]), max_size=2), first=st.booleans())
@example(sets=["loader.batch_size=" + "1" * 5000], good=[], first=True)
@example(sets=["model.hidden=" + "[" * 5000], good=[], first=True)
@example(sets=["loader.batch_size\n=0"], good=[], first=True)
@example(sets=["train.device=cuda:²"], good=[], first=True)  # accepted, then torch.device() raised a traceback
def test_run_with_a_bad_set_exits_2_with_one_line_before_training(capsys, no_training, tmp_path_factory, sets, good,
                                                                    first):
    out = tmp_path_factory.getbasetemp() / "cli-out"
    overrides = sets + good if first else good + sets
    run_cli(capsys, ["run", str(QUICK), "--quiet", "--out", str(out), *(f"--set={o}" for o in overrides)])
    assert not out.exists()


@fuzz(40)
@given(path=st.one_of(st.text(max_size=30), st.sampled_from(["", "-", "/", ".", "..", "/dev/null", "a\nb",
                                                              "scenarios", "\x1b[31m.toml"])))
def test_run_with_a_bad_scenario_path_exits_2_with_one_line(capsys, no_training, path):
    assume(not Path(path).is_file() or Path(path).stat().st_size == 0)  # an empty file has no [train]: refused
    run_cli(capsys, ["run", "--quiet", "--", path])


@fuzz(40)
@given(grids=st.lists(st.one_of(
    st.builds(lambda s, v: f"{s}.num_workers={v}", unknown_sections, grid_values),
    st.integers(max_value=-1).map(lambda n: f"loader.num_workers=0,{n}"),
    st.just("loader.num_workers=1,1"), st.just("loader.num_workers="), st.text(max_size=10).map(
        lambda t: t.replace("=", ""))), min_size=1, max_size=2))
@example(grids=["loader.num_workers=" + "1" * 5000])
def test_sweep_with_a_bad_grid_exits_2_with_one_line_before_running(capsys, no_training, tmp_path_factory, grids):
    out = tmp_path_factory.getbasetemp() / "cli-sweep-out"
    run_cli(capsys, ["sweep", str(QUICK), "--quiet", "--out", str(out), *(f"--grid={g}" for g in grids)])
    assert not out.exists()


# ---- 6. configuration is data only ----------------------------------------------------------------


def payloads(marker: Path) -> list[str]:
    return ["__import__('os').system('touch /tmp/pwned')", f"__import__('os').system('touch {marker}')",
            f"$(touch {marker})", f"`touch {marker}`", f"; touch {marker}", f"| touch {marker}",
            "${HOME}", "$HOME", "%(HOME)s", "%HOME%", "~", "$(id)", "{{7*7}}", "${{7*7}}", "#{7*7}", "{0.__class__}",
            "{name}", "%s%n", f"!!python/object/apply:os.system ['touch {marker}']", "<script>alert(1)</script>",
            "../../../etc/passwd", "\\u0041", "\\n", "\\", '"; import os; "', "'''; import os; '''"]


def test_strings_in_a_scenario_are_kept_verbatim_and_never_executed(tmp_path):
    marker, pwned = tmp_path / "pwned", Path("/tmp/pwned")
    pwned_before = pwned.exists()
    for payload in payloads(marker):
        path = tmp_path / "payload.toml"
        path.write_text(tomli_w.dumps({**QUICK_RAW, "name": payload, "description": payload}), encoding="utf-8")
        s = load_scenario(path)
        assert (s.name, s.description) == (payload, payload)
        check_scenario(s)  # written back by to_toml (what child processes read): the same strings
        # the same strings through --set (bare words), as grid values, and as an unknown key: data or a refusal
        via_set = outcome(load_scenario, QUICK, [f"name={payload}", f"description={payload}"])
        if isinstance(via_set, Scenario):  # a bare word verbatim, or the string a quoted TOML value denotes
            try:
                quoted = tomllib.loads(f"v = {payload}")["v"]
            except tomllib.TOMLDecodeError:
                quoted = payload
            assert via_set.name == via_set.description and via_set.name in (payload, quoted)
        assert isinstance(outcome(load_scenario, QUICK, [f"data.storage={payload}"]), UsageError)
        assert isinstance(outcome(build_axes, [], [parse_axis(f"data.storage=ram,{payload}")], "s.toml"),
                          UsageError)
        path.write_text(tomli_w.dumps({**QUICK_RAW, payload: payload}), encoding="utf-8")
        assert isinstance(outcome(load_scenario, path), UsageError)
    assert not marker.exists()
    assert pwned.exists() == pwned_before


def test_the_environment_is_not_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEPROF_FUZZ_SECRET", "leaked")
    path = tmp_path / "env.toml"
    path.write_text(tomli_w.dumps({**QUICK_RAW, "name": "${PIPEPROF_FUZZ_SECRET}",
                                   "description": "$PIPEPROF_FUZZ_SECRET %PIPEPROF_FUZZ_SECRET%"}))
    s = load_scenario(path)
    assert (s.name, s.description) == ("${PIPEPROF_FUZZ_SECRET}", "$PIPEPROF_FUZZ_SECRET %PIPEPROF_FUZZ_SECRET%")
    assert "leaked" not in repr(s) and "leaked" not in to_toml(scenario_dict(s))
    message = str(outcome(load_scenario, path, ["model.activation=$PIPEPROF_FUZZ_SECRET"]))
    assert "$PIPEPROF_FUZZ_SECRET" in message and "leaked" not in message
    assert os.environ["PIPEPROF_FUZZ_SECRET"] == "leaked"
