"""pipeprof.format: one text for each kind of number, and "not measured" for what is missing."""

import math

import numpy as np
import pytest

from pipeprof import format as fmt
from pipeprof.format import NOT_MEASURED
from pipeprof.numbers import finite, scaled

MISSING = [None, float("nan"), float("inf"), -float("inf"), "junk", True, False, [], {}, object()]


@pytest.mark.parametrize("value", MISSING)
def test_every_formatter_says_not_measured_for_a_missing_or_non_finite_value(value):
    for text in (fmt.number(value), fmt.pct(value), fmt.pp(value), fmt.byte_size(value), fmt.byte_rate(value),
                 fmt.rate(value), fmt.duration(value)):
        assert text == NOT_MEASURED


def test_the_caller_names_the_words_for_a_missing_value():
    assert fmt.pct(None, missing="an unknown share") == "an unknown share"
    assert fmt.duration(float("nan"), missing="") == ""
    assert fmt.number(math.inf, missing="?") == "?"


def test_finite_reads_numbers_of_every_kind_and_nothing_else():
    assert finite(3) == 3.0 and finite("2.5") == 2.5 and finite(np.float32(0.5)) == 0.5 and finite(np.int64(7)) == 7
    assert finite(-0.0) == 0.0 and finite(1e308) == 1e308
    for value in MISSING:
        assert finite(value) is None
    assert scaled(2, 1e3) == 2000.0 and scaled(None, 1e3) is None and scaled(True, 2) is None


@pytest.mark.parametrize("value, text", [
    (0, "0"), (1, "1"), (7, "7"), (-7, "-7"), (1234.5, "1,234"), (99.96, "100"), (12.34, "12.3"), (1.234, "1.23"),
    (0.01234, "0.0123"), (-0.01234, "-0.0123"), (0.0, "0"), (-0.0, "0"), (1e15, "1,000,000,000,000,000"),
    (10**30, "1,000,000,000,000,000,019,884,624,838,656"), (np.float64(2.5), "2.50"),
])
def test_number(value, text):
    assert fmt.number(value) == text


def test_number_with_fixed_digits_never_prints_minus_zero():
    assert fmt.number(1234.5678, 2) == "1,234.57"
    assert fmt.number(-0.0001, 2) == "0.00"
    assert fmt.number(-0.4, 0) == "0"
    assert fmt.number(-1.5, 1) == "-1.5"


@pytest.mark.parametrize("fraction, text", [
    (0.3, "30%"), (0, "0%"), (1, "100%"), (0.045, "4.5%"), (0.1, "10%"), (0.0999, "10.0%"), (1.532, "153%"),
    (-0.25, "-25%"), (-0.0001, "0.0%"), (123.4, "12,340%"),
])
def test_pct_is_whole_from_ten_percent_up_and_has_one_decimal_below(fraction, text):
    assert fmt.pct(fraction) == text


def test_pct_with_explicit_digits():
    assert fmt.pct(0.3, 1) == "30.0%"
    assert fmt.pct(0.3, 0) == "30%"
    assert fmt.pct(0.123456, 2) == "12.35%"
    assert fmt.pct(-0.0004, 1) == "0.0%"


def test_pp_is_always_signed():
    assert fmt.pp(12.34) == "+12.3 pp"
    assert fmt.pp(-12.34) == "-12.3 pp"
    assert fmt.pp(0) == "+0.0 pp"
    assert fmt.pp(-0.04) == "+0.0 pp"  # rounds to zero: no "-0.0"


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"), (1, "1 B"), (900, "900 B"), (1023, "1,023 B"), (1024, "1.00 KiB"), (12.5 * 1024, "12.5 KiB"),
    (2**29, "512 MiB"), (1.5 * 2**30, "1.50 GiB"), (2**40, "1.00 TiB"), (2**60, "1,024 PiB"), (-2048, "-2.00 KiB"),
])
def test_byte_size_uses_binary_units(nbytes, text):
    assert fmt.byte_size(nbytes) == text


def test_byte_rate_is_always_mib_per_second():
    assert fmt.byte_rate(10 * 2**20) == "10.0 MiB/s"
    assert fmt.byte_rate(512 * 1024) == "0.5 MiB/s"
    assert fmt.byte_rate(0) == "0 MiB/s"
    assert fmt.byte_rate(150e6) == "143 MiB/s"  # 150 MB/s
    assert fmt.byte_rate(2**50) == "1,073,741,824 MiB/s"


def test_rate_carries_its_unit():
    assert fmt.rate(1234.5) == "1,234 samples/s"
    assert fmt.rate(3.5, "steps/s") == "3.5 steps/s"
    assert fmt.rate(0, "reads/s") == "0 reads/s"


@pytest.mark.parametrize("value, text", [
    (4.3, "4.3 samples/s"), (4.26, "4.26 samples/s"), (0.52, "0.52 samples/s"), (0.5234, "0.523 samples/s"),
    (37176.4, "37,176 samples/s"), (12.34, "12.3 samples/s"), (99.96, "100 samples/s"), (9.996, "10 samples/s"),
    (2.0, "2 samples/s"), (1.2345e-5, "0.0000123 samples/s"), (-3.21, "-3.21 samples/s"), (-0.0001, "-0.0001 samples/s"),
])
def test_low_rates_keep_three_significant_figures(value, text):
    """Issue 14 item 11: a throughput of 4.3 samples/s printed as "4 samples/s"; 0.52 as "1"."""
    assert fmt.rate(value) == text


def test_significant_figures():
    assert fmt.significant(4.3) == "4.3" and fmt.significant(0.52, 1) == "0.5" and fmt.significant(37176.4) == "37,176"
    assert fmt.significant(None) == fmt.NOT_MEASURED and fmt.significant(-1e-12) == "-0.000000000001"


def test_a_change_is_computed_from_the_unrounded_numbers():
    """"compute ceiling 4 samples/s is 0 % above the 4 samples/s now": 4.3 over 4.26 is 0.9% above."""
    assert fmt.change_pct(4.3, 4.26) == "0.9% above"
    assert fmt.change_pct(4, 5) == "20% below"
    assert fmt.change_pct(4.0001, 4) == "the same"
    assert fmt.change_pct(4, 0) == fmt.change_pct(None, 4) == fmt.NOT_MEASURED


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (1e-9, "0.001 µs"), (1.23e-5, "12.3 µs"), (999e-6, "999 µs"), (0.0009996, "1.00 ms"),
    (0.0123, "12.3 ms"), (0.5, "500 ms"), (0.9999, "1.00 s"), (1, "1.00 s"), (4.5, "4.50 s"), (59.94, "59.9 s"),
    (59.96, "1 min"), (83, "1 min 23 s"), (120, "2 min"), (3600.4, "60 min"), (86400 * 365, "525,600 min"),
    (-0.5, "-500 ms"), (-83, "-1 min 23 s"),
])
def test_duration_picks_the_unit_that_keeps_the_number_below_a_thousand(seconds, text):
    assert fmt.duration(seconds) == text


@pytest.mark.parametrize("count, word, text", [
    (0, "worker", "0 workers"), (1, "worker", "1 worker"), (2, "worker", "2 workers"), (1.0, "core", "1 core"),
    (2.0, "core", "2 cores"), (1.5, "core", "1.50 cores"), (-1, "step", "-1 steps"), (10**6, "sample", "1,000,000 samples"),
    (np.int64(3), "epoch", "3 epochs"), (None, "worker", "an unknown number of workers"),
    (float("nan"), "step", "an unknown number of steps"),
])
def test_plural(count, word, text):
    assert fmt.plural(count, word) == text


def test_plural_takes_an_irregular_plural():
    assert fmt.plural(2, "process", "processes") == "2 processes"
    assert fmt.plural(1, "process", "processes") == "1 process"


@pytest.mark.parametrize("value, text", [
    (True, "true"), (False, "false"), (None, "unset"), ([256, 128], "256x128"), ((1, 2), "1x2"), ([], ""),
    ("ram", "ram"), (2, "2"), (0.5, "0.5"), ({"preset": "nfs"}, "nfs"),
    ({"latency_ms": 5, "bandwidth_mb_s": 50}, "latency_ms=5 bandwidth_mb_s=50"), (float("nan"), "NaN"),
])
def test_setting_is_the_short_text_of_a_scenario_value(value, text):
    assert fmt.setting(value) == text


@pytest.mark.parametrize("value, text", [
    (True, "true"), ("ram", "ram"), ("cuda-0", "cuda-0"), ("a b", "'a b'"), ("", "''"), (2, "2"),
    ([256, 128], "[256, 128]"),
])
def test_setting_arg_is_what_set_takes(value, text):
    assert fmt.setting_arg(value) == text


def test_setting_literal_quotes_strings_and_stays_bounded():
    assert fmt.setting_literal("ram") == "'ram'"
    assert fmt.setting_literal(False) == "false"
    assert fmt.setting_literal(None) == "unset"
    assert fmt.setting_literal([1, [2, "x"]]) == "[1, [2, 'x']]"
    assert fmt.setting_literal({"preset": "hdd"}) == "'hdd'"
    assert fmt.setting_literal(list(range(20))) == "[0, 1, 2, 3, 4, 5, 6, 7, ...]"
    assert fmt.setting_literal([[[[[1]]]]]) == "[[[[...]]]]"
    assert fmt.setting_literal(10**5000) == "an integer of 16610 bits"


def test_setting_literal_writes_a_throttle_inline_and_never_dumps_other_tables():
    assert fmt.setting_literal({"latency_ms": 5, "bandwidth_mb_s": 50}) == "{latency_ms = 5, bandwidth_mb_s = 50}"
    assert fmt.setting_literal([{"a": 1}]) == "[a table]"
    assert fmt.setting_literal({"a": [1, 2]}) == "a table"
    assert fmt.setting_literal({str(i): i for i in range(9)}) == "a table"
    assert fmt.setting_literal({"a\nb": "x\x1b"}) == "{a\\nb = 'x\\x1b'}"


def test_printable_escapes_what_a_terminal_would_act_on():
    assert fmt.printable("ram") == "ram"
    assert fmt.printable("a\nb") == "a\\nb"
    assert fmt.printable("\x1b[31mred") == "\\x1b[31mred"
    assert fmt.printable("") == ""
    assert fmt.printable("µs → ok") == "µs → ok"
    assert "\n" not in fmt.printable("\r\n\t") and fmt.printable("\r\n\t").isprintable()
