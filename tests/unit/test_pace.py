"""``worker.core.pace``: the delete rate follows the metadata store's latency (AIMD), within its bounds."""

from __future__ import annotations

from worker.core.pace import Pace, PaceRules, p90

RULES = PaceRules(ceiling=500, floor=5, latency_factor=1.5, min_samples=5)
CALM = {"read": [0.002] * 20, "write": [0.004] * 10}


def test_it_starts_at_a_tenth_of_the_ceiling_and_creeps_up_while_the_store_is_calm() -> None:
    pace = Pace(RULES)
    assert pace.rate == 50
    rates = [pace.update(CALM) for _ in range(30)]
    assert rates[:3] == [75, 100, 125] and rates[-1] == 500  # +25/s an interval, capped at the ceiling
    assert pace.decreases == 0 and pace.last_ratio == 1.0


def test_a_slow_interval_halves_the_rate_and_the_floor_holds() -> None:
    pace = Pace(RULES, rate=400)
    for _ in range(40):
        pace.update(CALM)  # the idle level: reads 2 ms, writes 4 ms
    assert pace.rate == 500
    assert pace.update({"read": [0.002] * 20, "write": [0.004] * 5 + [0.03] * 5}) == 250
    assert pace.decreases == 1 and pace.last_ratio == 7.5
    for _ in range(10):
        pace.update({"write": [0.05] * 10})
    assert pace.rate == 5  # never below the floor: the backlog still moves


def test_each_kind_is_compared_with_its_own_idle_level() -> None:
    # Writes are slower than reads by nature: a calm mix of both is no reason to slow down.
    pace = Pace(RULES, rate=100)
    pace.update({"read": [0.001] * 20})
    assert pace.update({"read": [0.001] * 20, "write": [0.01] * 20}) == 150
    assert pace.decreases == 0


def test_the_idle_level_is_the_lower_quartile_of_its_windows_p90s() -> None:
    pace = Pace(PaceRules(ceiling=100, floor=1, latency_factor=1.5, baseline_intervals=4), rate=50)
    for tail in (0.010, 0.002, 0.003, 0.004):
        pace.update({"read": [tail] * 10})
    assert pace.baseline_s("read") == 0.003  # one lucky interval (2 ms) does not set it
    for tail in (0.005, 0.006):  # the 10 ms and 2 ms intervals leave the window
        pace.update({"read": [tail] * 10})
    assert pace.baseline_s("read") == 0.004


def test_too_few_calls_say_nothing() -> None:
    pace = Pace(RULES, rate=100)
    assert pace.update({"read": [5.0] * 4}) == 100 and pace.last_ratio is None
    assert pace.update({}) == 100


def test_a_store_answering_in_microseconds_is_not_read_as_slow() -> None:
    pace = Pace(RULES, rate=100)
    pace.update({"read": [0.0001] * 10})
    assert pace.update({"read": [0.0009] * 10}) == 150  # under the 1 ms least idle level


def test_p90() -> None:
    assert p90([0.001 * i for i in range(1, 11)]) == 0.01
    assert p90([3.0]) == 3.0
