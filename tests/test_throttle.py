"""The sleep throttle: computed waits with a fake sleep, pickling, and real sleeps side by side."""

import pickle
import statistics
import time

import pytest

from pipeprof.scenario import THROTTLE_PRESETS, ThrottleSpec
from pipeprof.storage.throttle import BYTES_PER_MB, SleepThrottle, from_spec

SAMPLE_BYTES = 3136  # one 28x28 float32 sample


class FakeSleep:
    def __init__(self):
        self.calls = []

    def __call__(self, seconds):
        self.calls.append(seconds)


@pytest.mark.parametrize("preset, latency_s, bytes_per_s", [
    ("hdd", 0.008, 150e6),
    ("nfs", 0.001, 110e6),
    ("object", 0.030, 80e6),
])
def test_presets_wait_latency_plus_transfer(preset, latency_s, bytes_per_s):
    sleep = FakeSleep()
    throttle = from_spec(THROTTLE_PRESETS[preset], sleep=sleep)
    throttle.wait(SAMPLE_BYTES)
    throttle.wait(0)
    assert sleep.calls == pytest.approx([latency_s + SAMPLE_BYTES / bytes_per_s, latency_s])


def test_custom_spec_uses_megabytes_of_a_million_bytes():
    sleep = FakeSleep()
    throttle = from_spec(ThrottleSpec(latency_ms=2.0, bandwidth_mb_s=100.0), sleep=sleep)
    assert BYTES_PER_MB == 1_000_000
    assert throttle.latency_s == pytest.approx(0.002)
    assert throttle.bandwidth_bytes_per_s == pytest.approx(100e6)
    throttle.wait(SAMPLE_BYTES)
    throttle.wait(10_000_000)
    assert sleep.calls == pytest.approx([0.002 + 3136 / 100e6, 0.002 + 0.1])
    assert throttle.delay_s(SAMPLE_BYTES) == pytest.approx(0.00203136)


def test_zero_latency_is_pure_bandwidth():
    sleep = FakeSleep()
    SleepThrottle(0.0, 1e6, sleep=sleep).wait(500_000)
    assert sleep.calls == pytest.approx([0.5])


@pytest.mark.parametrize("latency_s, bandwidth", [(-0.001, 1e6), (0.0, 0.0), (0.0, -5.0)])
def test_impossible_values_are_refused(latency_s, bandwidth):
    with pytest.raises(ValueError):
        SleepThrottle(latency_s, bandwidth)


def test_pickles_for_dataloader_workers():
    throttle = from_spec(THROTTLE_PRESETS["nfs"])
    copy = pickle.loads(pickle.dumps(throttle))
    assert copy.sleep is time.sleep
    assert (copy.latency_s, copy.bandwidth_bytes_per_s) == (throttle.latency_s, throttle.bandwidth_bytes_per_s)
    assert copy.delay_s(SAMPLE_BYTES) == throttle.delay_s(SAMPLE_BYTES)


# Real sleeps overshoot a little (timer slack, scheduling: ~0.1 ms a call here,
# +5%); a 30% margin catches a wrong formula (a factor of 10 in the units)
# without failing on a busy machine. The median of five side-by-side repeats
# is compared, not a single run.
REAL_SLEEP_TOLERANCE = 0.30


def test_real_sleeps_add_the_computed_time():
    throttle = SleepThrottle(latency_s=0.002, bandwidth_bytes_per_s=100e6)
    source = bytes(SAMPLE_BYTES * 50)

    def loop(wait):
        t0 = time.perf_counter()
        for i in range(50):
            payload = bytes(source[i * SAMPLE_BYTES:(i + 1) * SAMPLE_BYTES])
            if wait:
                throttle.wait(len(payload))
        return time.perf_counter() - t0

    expected_s = 50 * throttle.delay_s(SAMPLE_BYTES)  # 50 x 2.03136 ms
    ratios = [(loop(True) - loop(False)) / expected_s for _ in range(5)]
    assert 1.0 <= statistics.median(ratios) <= 1.0 + REAL_SLEEP_TOLERANCE, ratios
