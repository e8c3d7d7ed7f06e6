"""The producer id simulation in CI: 300 seeds (by hand: ``python -m tests.sim.producer_id_sim
--seeds 5000``), plus proof that the checker catches each broken rule."""

import pytest

from tests.sim.producer_id_sim import PidSim, run_seeds

SEEDS = 300
BATCH = 150


@pytest.mark.parametrize("first", range(0, SEEDS, BATCH))
def test_no_producer_id_is_handed_out_twice(first):
    failures = run_seeds(range(first, first + BATCH))
    assert not failures, f"{len(failures)} seeds violated an invariant; first:\n{failures[0]}"


@pytest.mark.parametrize("bad, seeds, says", [
    ("answer_before_commit", range(40), ("handed out twice", "overlaps")),
    ("stale_image", range(20), ("handed out twice", "overlaps")),
    ("early_active", range(60), ("handed out twice", "overlaps")),
])
def test_checker_catches_a_broken_rule(bad, seeds, says):
    failures = run_seeds(seeds, bad=bad)
    assert failures, f"--bad {bad} went unnoticed"
    assert any(s in failures[0] for s in says)
    assert "python -m tests.sim.producer_id_sim --seed" in failures[0]
    assert failures[0].rstrip().endswith(f"--bad {bad}")


def test_a_seed_replays_exactly():
    a = PidSim(11).run_all()
    b = PidSim(11).run_all()
    assert a.owner == b.owner and a.granted == b.granted and dict(a.stats) == dict(b.stats)


def test_the_faults_happen_and_blocks_are_prefetched():
    """Over a few seeds: brokers restart, controllers fail over, and most blocks arrive
    before the previous one ran out (the 90% prefetch), so ids keep flowing."""
    stats = {}
    leaders = ids = blocks = 0
    for s in range(8):
        sim = PidSim(s).run_all()
        for k, v in sim.stats.items():
            stats[k] = stats.get(k, 0) + v
        leaders += len(sim.leaders)
        ids += len(sim.owner)
        blocks += len(sim.granted)
    assert stats["broker_restart"] > 5 and stats.get("crash", 0) > 2
    assert leaders > 8                       # failovers: more than one leader per run
    assert ids > blocks * 500                # blocks are mostly used, not thrown away
