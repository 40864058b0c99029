"""``worker.core.pace``: the delete rate follows the metadata store's latency (AIMD), within its bounds."""

from __future__ import annotations

from worker.core.pace import Pace, PaceChange, PaceRules, p90

RULES = PaceRules(ceiling=500, floor=5, latency_factor=1.5, min_samples=5)
CALM = {"read": [0.002] * 20, "write": [0.004] * 10}
SLOW = {"read": [0.002] * 20, "write": [0.05] * 10}  # writes 12.5x their idle level
# Deletes issued in an interval (or waiting for a token at its end): the pace moves only with some.
DELETING = 3
IDLE = 0


def test_it_starts_at_a_tenth_of_the_ceiling_and_creeps_up_while_the_store_is_calm() -> None:
    pace = Pace(RULES)
    assert pace.rate == 50
    rates = [pace.update(CALM, deletes=DELETING) for _ in range(30)]
    assert rates[:3] == [75, 100, 125] and rates[-1] == 500  # +25/s an interval, capped at the ceiling
    assert pace.decreases == 0 and pace.last_ratio == 1.0


def test_a_slow_interval_halves_the_rate_and_the_floor_holds() -> None:
    pace = Pace(RULES, rate=400)
    for _ in range(40):
        pace.update(CALM, deletes=DELETING)  # the idle level: reads 2 ms, writes 4 ms
    assert pace.rate == 500
    assert pace.update({"read": [0.002] * 20, "write": [0.004] * 5 + [0.03] * 5}, deletes=DELETING) == 250
    assert pace.decreases == 1 and pace.last_ratio == 7.5
    for _ in range(10):
        pace.update({"write": [0.05] * 10}, deletes=DELETING)
    assert pace.rate == 5  # never below the floor: the backlog still moves


def test_each_kind_is_compared_with_its_own_idle_level() -> None:
    # Writes are slower than reads by nature: a calm mix of both is no reason to slow down.
    pace = Pace(RULES, rate=100)
    pace.update({"read": [0.001] * 20}, deletes=DELETING)
    assert pace.update({"read": [0.001] * 20, "write": [0.01] * 20}, deletes=DELETING) == 150
    assert pace.decreases == 0


def test_the_idle_level_is_the_lower_quartile_of_its_windows_p90s() -> None:
    pace = Pace(PaceRules(ceiling=100, floor=1, latency_factor=1.5, baseline_intervals=4), rate=50)
    for tail in (0.010, 0.002, 0.003, 0.004):
        pace.update({"read": [tail] * 10}, deletes=DELETING)
    assert pace.baseline_s("read") == 0.003  # one lucky interval (2 ms) does not set it
    for tail in (0.005, 0.006):  # the 10 ms and 2 ms intervals leave the window
        pace.update({"read": [tail] * 10}, deletes=DELETING)
    assert pace.baseline_s("read") == 0.004


def test_too_few_calls_say_nothing() -> None:
    pace = Pace(RULES, rate=100)
    assert pace.update({"read": [5.0] * 4}, deletes=DELETING) == 100 and pace.last_ratio is None
    assert pace.update({}, deletes=DELETING) == 100


def test_a_store_answering_in_microseconds_is_not_read_as_slow() -> None:
    pace = Pace(RULES, rate=100)
    pace.update({"read": [0.0001] * 10}, deletes=DELETING)
    assert pace.update({"read": [0.0009] * 10}, deletes=DELETING) == 150  # under the 1 ms least idle level


def test_with_nothing_to_delete_the_pace_holds_however_slow_the_store() -> None:
    # Defect: a worker with nothing queued halved its rate on a store warming up (latency ratio 2 to 3), eight
    # "delete rate halved" lines in its first 40 s. Nothing is paced, so nothing moves.
    pace = Pace(RULES)
    for _ in range(8):
        assert pace.update(CALM, deletes=IDLE) == 50  # no growth either
    for _ in range(8):
        assert pace.update(SLOW, deletes=IDLE) == 50
    assert pace.decreases == 0 and not pace.slowed and pace.last_change is None
    assert pace.last_ratio == 12.5  # still measured: the gauge shows the store as it is
    # The idle intervals set the idle level (that is the store idle): deleting then, a slow interval halves.
    assert pace.baseline_s("write") == 0.004
    assert pace.update(SLOW, deletes=DELETING) == 25 and pace.decreases == 1


def test_a_state_change_is_named_once_not_at_every_step() -> None:
    pace = Pace(RULES, rate=400)
    for _ in range(5):
        pace.update(CALM, deletes=DELETING)
    assert pace.rate == 500 and pace.last_change is None  # climbing from the start is not a recovery
    changes = []
    for _ in range(6):
        pace.update(SLOW, deletes=DELETING)
        changes.append(pace.last_change)
    assert pace.decreases == 6 and pace.rate == 7.8125
    assert changes == [PaceChange.SLOWED] + [None] * 5 and pace.slowed
    pace.update(CALM, deletes=IDLE)
    assert pace.rate == 7.8125 and pace.slowed  # idle: held where it was
    changes = []
    for _ in range(25):
        pace.update(CALM, deletes=DELETING)
        changes.append(pace.last_change)
    assert pace.rate == 500 and not pace.slowed
    assert changes.count(PaceChange.RECOVERED) == 1 and changes[-1] is None  # once, on reaching the ceiling
    pace.update(SLOW, deletes=DELETING)
    assert pace.last_change is PaceChange.SLOWED  # a new episode is named again


def test_a_halving_that_cannot_go_below_the_ceiling_is_no_slowdown() -> None:
    # deletes_per_second under the floor: the floor is the ceiling, so a halving changes nothing to report.
    pace = Pace(PaceRules(ceiling=3, floor=3, latency_factor=1.5), rate=3)
    pace.update(CALM, deletes=DELETING)
    assert pace.update(SLOW, deletes=DELETING) == 3
    assert pace.decreases == 1 and not pace.slowed and pace.last_change is None


def test_p90() -> None:
    assert p90([0.001 * i for i in range(1, 11)]) == 0.01
    assert p90([3.0]) == 3.0
