"""Seeded simulations of one partition on 3 and 5 brokers under crashes, cut links, lost
messages and late metadata (tests/replication/sim.py). A failure names its seed and the
one-line command that replays it; ``python -m tests.replication.sim --seeds N`` soaks."""

import logging

import pytest

from tests.replication.sim import InvariantError, Sim, run


@pytest.fixture(autouse=True)
def _quiet_unclean_warnings():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("block", range(10))
def test_three_brokers_min_isr_two(block):
    acked = 0
    for seed in range(block * 100, block * 100 + 100):
        acked += len(run(seed, 400).acked)
    assert acked > 1_000  # the load really was acknowledged, not refused throughout


@pytest.mark.parametrize("block", range(2))
def test_five_brokers_min_isr_three(block):
    for seed in range(block * 100, block * 100 + 100):
        run(seed, 400, n=5, min_isr=3)


def test_unclean_elections_still_converge():
    for seed in range(200):
        run(seed, 400, unclean=True)


def test_the_checker_catches_a_lost_acknowledged_record():
    sim = Sim(1)
    for _ in range(200):
        sim.step(faults=False)
    assert sim.acked
    value, off = next(iter(sim.acked.items()))
    victim = sim.nodes[sim.part.isr[-1]].replica
    victim.entries[off] = (victim.entries[off][0], -1)
    with pytest.raises(InvariantError, match="missing from ISR member"):
        sim.check()


def test_the_checker_catches_disagreement_below_the_high_watermark():
    sim = Sim(2)
    for _ in range(200):
        sim.step(faults=False)
    a, b = sim.nodes[1].replica, sim.nodes[2].replica
    assert min(a.hw, b.hw) > 0
    sim.acked.clear()
    b.entries[0] = (b.entries[0][0], -5)
    with pytest.raises(InvariantError, match="disagree below"):
        sim.check()
