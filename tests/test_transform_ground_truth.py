"""Ground truth for issue 18 (item 6): real small scripts under `pipeprof profile`, with transforms and a decode of
known injected costs; the per-transform and decode times read back from the run folder."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_profile_script import FIXTURES, profile

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # timings against a known truth: alone
INJECTED_MS = {"Cheap": 0.2, "Cheaper": 0.3, "Expensive": 3.0, "Lucky": 2.0}  # Lucky: in RandomApply(p=0.5)


def _truth(folder) -> dict[str, list[float]]:
    """What the fixture's sleeps really took, over its processes: name -> [calls, seconds]."""
    out: dict[str, list[float]] = {}
    for path in folder.glob("*.json"):
        for name, (calls, seconds) in json.loads(path.read_text()).items():
            got = out.setdefault(name, [0, 0.0])
            got[0] += calls
            got[1] += seconds
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_each_transform_of_a_compose_is_timed_within_10_percent_of_its_cost_and_ranked(tmp_path, workers):
    truth_dir = tmp_path / "truth"
    truth_dir.mkdir()
    proc, folder, s, meta = profile(tmp_path, "python", str(FIXTURES / "compose_costs.py"), "--num-workers",
                                    str(workers), "--truth", str(truth_dir), "--expensive-ms", "3",
                                    "--random-ms", "2")
    assert proc.returncode == 0, proc.stderr
    assert meta["transform_pipelines"]["0"] == [{"name": "Cheap", "random": None}, {"name": "Expensive", "random": None},
                                                {"name": "Lucky", "random": True}, {"name": "Cheaper", "random": None}]
    rows = pd.read_csv(folder / "transforms.csv")
    assert set(rows["worker"]) == ({-1} if workers == 0 else {0, 1})
    batches = rows[rows["kind"] == "batch"]
    samples = int(batches["calls"].sum())
    truth = _truth(truth_dir)
    expected_rank = []
    for name, injected_ms in INJECTED_MS.items():
        mine = rows[(rows["kind"] == "transform") & (rows["name"] == name)]
        calls = int(mine["calls"].sum())
        per_call_s = truth[name][1] / truth[name][0]  # what the sleep really took (it overshoots a little)
        assert injected_ms / 1000 <= per_call_s < injected_ms / 1000 * 1.1 + 0.0005  # the injection held
        expected = per_call_s * calls / samples  # the random one: its cost x its call fraction, per sample
        measured = float(mine["wall_s"].sum()) / samples
        expected_rank.append((-expected, name))
        assert measured == pytest.approx(expected, rel=0.10, abs=20e-6), name
        if name == "Lucky":
            assert 0.3 < calls / samples < 0.7  # RandomApply(p=0.5)
        else:
            assert calls == samples
    # the batch rows: every sample's __getitem__, which holds the transforms
    assert float(batches["wall_s"].sum()) >= float(rows[rows["kind"] == "transform"]["wall_s"].sum())
    ranked = [t["name"] for t in s["transforms"]]  # summary.json (analysis.transforms): costliest first
    assert ranked == [name for _, name in sorted(expected_rank)]
    assert ranked[:2] == ["Expensive", "Lucky"]  # 3 ms, then 2 ms x about half the samples


def test_imagefolder_decode_and_transform_split_matches_the_injected_split(tmp_path):
    decode_ms, transform_ms = 3.0, 1.0
    proc, folder, s, meta = profile(tmp_path, "python", str(FIXTURES / "imagefolder_train.py"), "--data",
                                    str(tmp_path / "images"), "--images-per-class", "20", "--decode-ms",
                                    str(decode_ms), "--sleep-transform-ms", str(transform_ms), "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    rows = pd.read_csv(folder / "transforms.csv")
    samples = int(rows[rows["kind"] == "batch"]["calls"].sum())
    decode = rows[rows["kind"] == "decode"]
    # ImageFolder's loader: Image.open (the slow first read: inside it), then load and convert, each once a sample
    assert set(decode["name"]) == {"PIL.Image.open", "PIL.Image.load", "PIL.Image.convert"}
    assert all(int(decode[decode["name"] == n]["calls"].sum()) == samples for n in set(decode["name"]))
    decode_s = float(decode["wall_s"].sum()) / samples
    sleep_s = float(rows[(rows["kind"] == "transform") & (rows["name"] == "Sleep")]["wall_s"].sum()) / samples
    transform_s = float(rows[rows["kind"] == "transform"]["wall_s"].sum()) / samples
    # a sleep overshoots (more so on a loaded machine): at least the injected time, at most 10 % + 0.8 ms more
    assert decode_ms / 1000 <= decode_s < decode_ms / 1000 * 1.1 + 0.0008
    assert transform_ms / 1000 <= sleep_s < transform_ms / 1000 * 1.1 + 0.0008
    # the injected split (the real transforms, ToTensor, Normalize..., add their own time to the transforms')
    assert decode_s / (decode_s + sleep_s) == pytest.approx(decode_ms / (decode_ms + transform_ms), abs=0.08)
    assert transform_s >= sleep_s
    assert s["decode"]["per_sample_s"] == pytest.approx(decode_s, rel=0.25)  # the counted steps' subset
