"""The coordinator failover simulation in CI (tests/groups/coordinator_sim.py): many seeds,
and proof that it catches a runtime that acknowledges writes before they are committed."""
from tests.groups.coordinator_sim import run_seeds

SEEDS = 300


def test_no_acknowledged_commit_is_lost_across_failovers():
    failures, stats = run_seeds(range(SEEDS))
    assert not failures, f"{len(failures)} seeds violated the invariant; first:\n{failures[0]}"
    # the faults really happen
    assert stats["failovers"] > SEEDS and stats["failed_appends"] > SEEDS and stats["acked"] > 5 * SEEDS


def test_the_simulation_catches_acks_before_the_high_watermark():
    failures, _ = run_seeds(range(50), bad="ack_on_append")
    assert failures, "acknowledging on append must lose commits on some failover"
    assert "reproduce: python -m tests.groups.coordinator_sim --seed" in failures[0]
