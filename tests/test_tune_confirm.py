"""tune confirms its best alternately with the settings as run (A B A B ..., fresh processes), medians kept."""

from __future__ import annotations

import math

import pytest
from test_verify import IMAGES

from pipeprof.pipeline.fresh_process import ChildRun
from pipeprof.pipeline.tune import confirm_best
from pipeprof.scenario import load_scenario


class Children:
    def __init__(self, rates):
        self.rates = {name: list(values) for name, values in rates.items()}
        self.calls: list[str] = []

    def __call__(self, scenario_file, out, cache=None):
        self.calls.append(scenario_file.name)
        folder = out / f"run-{len(self.calls)}"
        folder.mkdir(parents=True)
        rate = self.rates[scenario_file.name].pop(0)
        return ChildRun(0, folder, {"samples_per_s": rate, "verdict": {"class": "compute"}}, None)


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(IMAGES.replace('cache = "cold"\n', ""))
    return load_scenario(path)


def confirm(scenario, tmp_path, children, repeats):
    return confirm_best(scenario, {"loader.num_workers": 2}, tmp_path, scenario_file=tmp_path / "tiny.toml",
                        seconds=1.0, base={"loader.num_workers": 1}, repeats=repeats, runner=children)


def test_the_best_is_confirmed_alternately_with_the_settings_as_run(scenario, tmp_path):
    children = Children({"as-run.toml": [100.0, 110.0, 105.0], "best.toml": [200.0, 240.0, 210.0]})
    record = confirm(scenario, tmp_path, children, 3)
    assert children.calls == ["as-run.toml", "best.toml"] * 3
    assert record["samples_per_s"] == 210.0  # the median of the best's runs
    noise = record["interleaved"].pop("rerun_noise")
    assert record["interleaved"] == {"samples_per_s": [200.0, 240.0, 210.0], "base_samples_per_s": [100.0, 110.0, 105.0],
                                     "base_median_samples_per_s": 105.0, "base_disturbed": False}
    # the machine's re-run noise, from each setting's three fresh-process runs about their own mean
    logs = [[math.log(x) for x in side] for side in ([200.0, 240.0, 210.0], [100.0, 110.0, 105.0])]
    ss = sum((x - sum(side) / 3) ** 2 for side in logs for x in side)
    assert noise["df"] == 4 and noise["measured_cv"] == pytest.approx(math.sqrt(ss / 4))


def test_a_disturbed_base_is_flagged(scenario, tmp_path):
    children = Children({"as-run.toml": [118.0, 506.0, 480.0], "best.toml": [500.0, 510.0, 505.0]})
    assert confirm(scenario, tmp_path, children, 3)["interleaved"]["base_disturbed"] is True


def test_one_repeat_confirms_the_best_alone(scenario, tmp_path):
    children = Children({"best.toml": [200.0]})
    record = confirm(scenario, tmp_path, children, 1)
    assert children.calls == ["best.toml"] and "interleaved" not in record and record["samples_per_s"] == 200.0
