"""Reading a profiled script's event file into columns (analysis.script_events): the fast path, its fallbacks."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from pipeprof.script.event_file import Events, read_events
from pipeprof.script.hooks import NO_RECORD, EventLog


def random_events(rng: random.Random) -> list[tuple]:
    """A plausible stream as the hooks write it: loaders, passes, batches with or without a record, copies..."""
    t = 1000.0 + rng.random()
    events: list[tuple] = [("S", t, {"pid": 7, "argv": ["train.py", "--lr", "0.1"]})]
    for n in range(rng.randint(1, 3)):
        events.append(("L", n, {"number": n, "name": f"loader{n}", "batch_size": 64}))
    for _ in range(rng.randint(1, 40)):
        n = rng.randrange(3)
        kind = rng.choice("IENNNCCOMB")
        dt = rng.random() / 100
        if kind in "IE":
            events.append((kind, n, t, t + dt))
        elif kind == "N":
            record = [rng.choice([-1, 0, 3]), 4242, t - dt, t, dt / 2, dt / 3, dt / 6, 64,
                      rng.choice([dt / 7, None])] if rng.random() < 0.7 else NO_RECORD  # core wait unknown: None
            events.append(("N", n, t, t + dt, 64, record, rng.choice([None, 0, 2.0])))
        elif kind == "C":
            events.append(("C", t, t + dt, rng.randrange(1, 10**9), rng.choice([None, dt / 2])))
        elif kind == "B":
            events.append(("B", t, t + dt))
        else:
            events.append((kind, t))
        t += dt
    events.append(("T", t, {"at": "end", "torch_threads": rng.randint(1, 8)}))
    events.append(("X", t, "exit", 0))
    return events


def write(path, events: list[tuple]) -> None:
    log = EventLog(str(path))
    for event in events:
        log.add(event, 0.0)
    log.flush(final=True)


def same(a: Events, b: Events) -> None:
    assert a.loaders == b.loaders and a.start == b.start and a.end == b.end and a.wrapped == b.wrapped
    assert a.threads == b.threads
    assert a.unreadable == b.unreadable
    for kind, table in a.tables.items():
        assert list(table.columns) == list(b.tables[kind].columns)
        # the hooks write times and durations to the nanosecond
        np.testing.assert_allclose(table.to_numpy(), b.tables[kind].to_numpy(), rtol=0, atol=1e-9, err_msg=kind)


@pytest.mark.parametrize("seed", range(25))
def test_the_file_read_fast_holds_the_events_written(tmp_path, seed):
    events = random_events(random.Random(seed))
    path = tmp_path / "events.jsonl"
    write(path, events)
    from_file = read_events(path)
    same(from_file, Events.of([json.loads(json.dumps(e)) for e in events]))
    same(read_events(path, chunk_bytes=40), from_file)  # chunks that end mid-line
    batches = from_file.tables["N"]
    assert len(batches) == sum(1 for e in events if e[0] == "N")
    assert batches["made_samples"].isna().sum() == sum(1 for e in events if e[0] == "N" and e[5] is NO_RECORD)


def test_bad_lines_are_counted_and_the_good_ones_kept(tmp_path):
    good = [["O", 1.0], ["N", 0, 1.0, 1.5, 8, [0, 9, 0.5, 1.0, 0.2, 0.2, 0.1, 8], None], ["C", 1.5, 1.6, 10, None]]
    bad = [
        '["N", 0, 2.0, 2.5, 8, [0, 9, 0.5, 1.0, 0.2, 0.2, 0.1], null]',  # a record field missing
        '["N", 0, 3.0, 3.5, "eight", null, null]',  # not a number
        '["O", null]',  # a required time absent
        '["C", 1.5, 1.6]',  # too short
        '{"not": "a list"}',
        'garbage',
        '["N", 0, 4.0, 4',  # cut short by a kill
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([json.dumps(good[0]), bad[0], json.dumps(good[1]), *bad[1:5], "",
                               json.dumps(good[2]), bad[5], bad[6]]))
    events = read_events(path)
    assert events.unreadable == len(bad)
    assert events.tables["O"]["t_s"].tolist() == [1.0]
    assert events.tables["N"]["t0_s"].tolist() == [1.0] and events.tables["N"]["made_samples"].tolist() == [8.0]
    assert events.tables["C"]["nbytes"].tolist() == [10.0]


def test_events_of_kinds_with_few_fields_keep_their_meaning():
    events = Events.of([["S", 1.0, {"pid": 1}], ["S", 2.0, {"pid": 2}], ["W", 1], ["X", 3.0, "exit", 0],
                        ["X", 4.0, "signal", 9], ["L", "x", {}], ["Z", 1.0]])
    assert events.start == {"pid": 1}  # the first start
    assert events.end == {"how": "signal", "detail": 9}  # the last end
    assert events.wrapped == [1]
    assert events.unreadable == 1  # the loader numbered "x"; an unknown kind is ignored, not bad


def test_backward_passes_and_thread_readings_are_read_back(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, [("B", 1.0, 1.25), ("T", 1.5, {"at": "first step", "torch_threads": 1}), ("B", 2.0, 2.5),
                 ("T", 3.0, {"at": "end", "torch_threads": 2}), ("T", 3.5, {"torch_threads": 2})])
    events = read_events(path)
    assert events.tables["B"][["t0_s", "t1_s"]].to_numpy().tolist() == [[1.0, 1.25], [2.0, 2.5]]
    assert events.threads == [{"t_s": 1.5, "at": "first step", "torch_threads": 1},
                              {"t_s": 3.0, "at": "end", "torch_threads": 2}]
    assert events.unreadable == 1  # a reading that does not say when


def test_every_line_the_hooks_write_is_json_even_with_odd_fields(tmp_path):
    import numpy
    odd = [
        ("N", 0, 1.5, 2.5, numpy.int64(64), [0, 7, 1.0, 1.5, 0.1, 0.2, 0.05, 64, 0.01], float("nan")),  # NaN ready
        ("N", 1, 1.5, 2.5, 8, NO_RECORD, None),  # no record: nulls
        ("C", 1.0, 1.25, 10, numpy.float32(0.5)),  # a numpy number where a float belongs
        ("O", float("inf")),
        ("I", 0, 1.0, 1.000000001),
    ]
    path = tmp_path / "events.jsonl"
    write(path, odd)
    lines = path.read_text().splitlines()
    assert len(lines) == len(odd)
    parsed = [json.loads(line) for line in lines]  # none raises
    assert parsed[0][4] == 64 and parsed[1][5] == [None] * 9 and parsed[2][4] == 0.5
    assert parsed[4][3] - parsed[4][2] == pytest.approx(1e-9, abs=1e-12)  # nanoseconds survive
    events = read_events(path)
    assert events.tables["N"]["made_samples"].isna().tolist() == [False, True]
    assert events.tables["C"]["device_s"].tolist() == [0.5]


def test_the_wait_for_a_core_is_read_back_and_unknown_where_the_record_has_none(tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, [("N", 0, 1.0, 1.5, 8, [0, 9, 0.5, 1.0, 0.2, 0.2, 0.1, 8, 0.05], None),  # the fast path
                 ("N", 0, 2.0, 2.5, 8, [0, 9, 1.5, 2.0, 0.2, 0.2, 0.1, 8, None], None)])  # no schedstat
    assert '0.050000000], null]' in path.read_text().splitlines()[0]
    table = read_events(path).tables["N"]
    assert table["core_wait_s"].tolist()[0] == 0.05 and np.isnan(table["core_wait_s"].tolist()[1])
    assert table["fetch_s"].tolist() == [0.2, 0.2] and table["ready"].isna().all()
    # an event file from before the split (eight fields): its core wait is unknown, the rest as written
    old = tmp_path / "old.jsonl"
    old.write_text('["N", 0, 1.0, 1.5, 8, [0, 9, 0.5, 1.0, 0.2, 0.2, 0.1, 8], 2.000000000]\n')
    table = read_events(old).tables["N"]
    assert read_events(old).unreadable == 0
    assert table["made_samples"].tolist() == [8.0] and table["ready"].tolist() == [2.0]
    assert np.isnan(table["core_wait_s"].tolist()[0])
