"""The soak's figures (``bench.faults.soak_suite``): its schedule, the growth of each life's
memory and open files after warm-up, the run directory's growth, the account of every
transition against what its faults may lose, and the bar it is held to."""

from __future__ import annotations

from bench.faults import soak_suite
from bench.faults.soak_command import soak_checks
from replay.server.credit_desk import MAX_WINDOW


def _sample(time_s: float, processes: dict, disk: dict, rate: float = 1000.0) -> dict:
    return {
        "time_s": time_s,
        "processes": processes,
        "disk": disk,
        "transitions_per_s": rate,
        "updates_per_s": 100.0,
    }


def test_the_schedule_kills_every_period_and_stops_a_shard_once() -> None:
    plan = soak_suite.schedule(3600.0, 240.0, seed=0)
    kills = [t for t, what in plan if what.startswith("kill-")]
    assert kills == [240.0 * k for k in range(1, 15)]
    assert [what for _, what in plan].count("stop-shard") == 1
    assert plan == soak_suite.schedule(3600.0, 240.0, seed=0)  # drawn from the seed


def test_growth_is_judged_per_life_after_its_warm_up() -> None:
    warm, long = soak_suite.WARMUP_S, soak_suite.LONG_LIFE_S
    samples = []
    for t in range(0, int(warm + long + 61), 60):
        processes = {
            "10": {
                "role": "shard",
                "rss_bytes": 100 + (50 if t < warm else 0) + t // 60,
                "open_files": 30,
            },
            "11": {"role": "actor", "rss_bytes": 200, "open_files": 20 + (t > warm + 300)},
        }
        if t < 120:  # a life too short to judge: left out
            processes["12"] = {"role": "learner", "rss_bytes": 10, "open_files": 5}
        samples.append(_sample(t, processes, {"checkpoints": 10, "metrics": t}))
    growth = soak_suite.growth_figures(samples)
    assert set(growth) == {"shard", "actor"}
    shard = growth["shard"]
    first, last = 100 + warm // 60, 100 + (warm + long + 60) // 60
    assert abs(shard["rss_growth"] - (last / first - 1)) < 1e-9
    assert growth["actor"] == {
        "lives": 1,
        "rss_growth": 0.0,
        "open_files_spread": 1,
        "open_files_growth": 1,
    }
    disk = soak_suite.disk_figures(samples)
    assert disk["checkpoints"]["per_hour"] == 0 and disk["metrics"]["per_hour"] > 0


def test_a_dip_of_open_files_while_a_peer_restarts_is_no_growth() -> None:
    warm = soak_suite.WARMUP_S
    samples = [
        _sample(
            t,
            {"7": {"role": "actor", "rss_bytes": 100, "open_files": 19 if t == warm + 120 else 22}},
            {},
        )
        for t in range(0, int(warm + soak_suite.LONG_LIFE_S + 61), 60)
    ]
    figures = soak_suite.growth_figures(samples)["actor"]
    assert figures["open_files_spread"] == 3 and figures["open_files_growth"] == 0


def test_losses_are_held_against_what_the_faults_may_lose() -> None:
    faults = [
        {"fault": "kill-actor", "pid": 1},
        {"fault": "kill-shard", "pid": 2},
        {"fault": "kill-learner", "pid": None},
    ]
    samples = [_sample(0, {}, {}, rate=2000.0)]
    allowed = MAX_WINDOW * soak_suite.INSERT_BATCH + soak_suite.PERIOD_S * 2000.0
    delivery = {
        "actors": {"0": {"transitions_sent": 500_000}},
        "transitions_received": 480_000,
        "transitions_lost": 20_000,
        "transitions_in_transit": 0,
    }
    account = soak_suite.account(delivery, faults, samples)
    assert account["kills"] == {"actor": 1, "shard": 1, "learner": 0}
    assert account["loss_allowed_by_faults"] == round(allowed) and account["unaccounted"] == 0
    delivery["transitions_lost"] = round(allowed) + 7
    assert soak_suite.account(delivery, faults, samples)["unaccounted"] == 7


def test_the_soak_s_bar() -> None:
    config = {
        "exit_code": 0,
        "target_reached": True,
        "growth": {"shard": {"rss_growth": 0.01, "open_files_spread": 0}},
        "disk": {
            "checkpoints": {"bytes": 100, "per_hour": 0},
            "replay": {"bytes": 100, "per_hour": 5},
        },
        "account": {"unaccounted": 0},
        "actor_hangs": 1,
        "rotation_mb": {"metrics": 1.0, "log": 0.1, "kept_parts": 3},
        "samples": [{"disk": {"metrics": 4 * 2**20, "largest_log": 400_000}}],
    }
    assert all(soak_checks(config).values())
    config["growth"]["shard"]["rss_growth"] = 0.2
    config["disk"]["replay"]["per_hour"] = 500
    config["samples"].append({"disk": {"metrics": 4 * 2**20, "largest_log": 2**20}})
    config["actor_hangs"] = 0
    failed = [name for name, passed in soak_checks(config).items() if not passed]
    assert len(failed) == 4
    assert ["RSS" in failed[0], "snapshots bounded" in failed[1]] == [True, True]
    assert ["rotation" in failed[2], "watchdog" in failed[3]] == [True, True]
