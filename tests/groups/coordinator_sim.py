"""A seeded simulation of the group coordinator runtime through leadership changes.

One __consumer_offsets partition (fake replica manager, RF=3): clients commit increasing
offsets for a few groups; the followers catch up by random amounts; appends fail; leadership
leaves (the next leader keeps the log only up to some point at or above the high watermark,
as Kafka's election guarantees) and comes back with a higher epoch. After every step:
every commit the runtime acknowledged is in the committed part of the log (replaying the log
up to the high watermark gives at least that offset), so no acknowledged commit can be lost
by a failover; at the end the reloaded shard serves them.

    python -m tests.groups.coordinator_sim --seed 7 [--steps 80]
"""
from __future__ import annotations

import argparse
import asyncio
import random

from kbroker.groups import record_codec
from kbroker.groups.config import GroupConfig
from kbroker.groups.offsets import CommitPartition
from kbroker.groups.partitioning import OFFSETS_TOPIC
from kbroker.groups.records import OffsetCommitRecord
from kbroker.groups.runtime import CoordinatorError, GroupCoordinatorRuntime
from kbroker.groups.shard import OffsetCommitRequest
from tests.groups.fake_offsets_broker import FakeReplicas, fake_broker

GROUPS = ["a", "b", "c", "d"]


class Violation(AssertionError):
    pass


def replay_committed(part) -> dict[str, int]:
    """group -> offset of topic t partition 0, from the log up to the high watermark."""
    out: dict[str, int] = {}
    for batch in part.log.batches():
        for r in batch.records():
            if r.offset >= part.high_watermark:
                return out
            rec = record_codec.decode(r.key, r.value)
            if isinstance(rec, OffsetCommitRecord) and rec.value is not None:
                out[rec.group] = rec.value.offset
    return out


async def _run(seed: int, steps: int, bad: str | None) -> dict:
    rng = random.Random(seed)
    replicas = FakeReplicas(1, (1, 2, 3))
    broker = fake_broker(1, replicas)
    if bad == "ack_on_append":       # a broken runtime: answers without waiting for the ISR
        def at_once(waits, timeout_ms):
            fut = asyncio.get_running_loop().create_future()
            fut.set_result({w[0]: 0 for w in waits})
            return fut
        replicas.await_replication = at_once
    rt = GroupCoordinatorRuntime(broker, GroupConfig(num_partitions=1), lambda: 1_000)
    rt.start()
    part = replicas.get(OFFSETS_TOPIC, 0)
    leader, epoch = True, 1
    next_offset = {g: 0 for g in GROUPS}
    acked: dict[str, int] = {}
    tasks: list[tuple[asyncio.Task, str, int]] = []
    stats = {"acked": 0, "refused": 0, "failovers": 0, "failed_appends": 0}

    def check(step: int, what: str) -> None:
        for t, g, off in [x for x in tasks if x[0].done()]:
            tasks.remove((t, g, off))
            if t.exception() is None:
                acked[g] = max(acked.get(g, -1), off)
                stats["acked"] += 1
            elif isinstance(t.exception(), CoordinatorError):
                stats["refused"] += 1
            else:
                raise t.exception()
        have = replay_committed(part)
        for g, off in acked.items():
            if have.get(g, -1) < off:
                raise Violation(f"seed {seed} step {step} ({what}): group {g} acknowledged offset {off}, "
                                f"committed log has {have.get(g)}\nreproduce: python -m tests.groups.coordinator_sim "
                                f"--seed {seed} --steps {steps}" + (f" --bad {bad}" if bad else ""))

    for step in range(steps):
        roll = rng.random()
        if roll < 0.45:
            g = rng.choice(GROUPS)
            next_offset[g] += 1
            off = next_offset[g]
            oc = OffsetCommitRequest(g, [("t", [CommitPartition(0, off, -1, "")])], -1, "", version=8)
            tasks.append((asyncio.ensure_future(rt.run(g, lambda sh, now, oc=oc: sh.commit_offsets(oc, now))), g, off))
            what = f"commit {g}={off}"
        elif roll < 0.75:
            if leader:
                replicas.advance(part, rng.randint(part.high_watermark, part.log_end_offset))
            what = f"replicate to {part.high_watermark}"
        elif roll < 0.82:
            replicas.fail_next_append = rng.choice([6, 19])
            stats["failed_appends"] += 1
            what = "next append fails"
        elif roll < 0.92 and leader:
            epoch += 1
            leader = False
            replicas.set_role(0, leader=False, epoch=epoch)
            # the new leader has the log up to somewhere at or above the high watermark
            keep = rng.randint(part.high_watermark, part.log_end_offset)
            n = 0
            kept = []
            for buf in part.log.buffers:
                from kbroker.wire.records import RecordBatch
                c = RecordBatch(bytearray(buf)).records_count
                if n + c > keep:
                    break
                kept.append(buf)
                n += c
            part.log.buffers = kept
            part.log.high_watermark = min(part.log.high_watermark, n)
            stats["failovers"] += 1
            what = f"failover (log kept to {n})"
        elif not leader:
            epoch += 1
            leader = True
            replicas.set_role(0, leader=True, epoch=epoch)
            assert rt.shard_for("a").coordinator_epoch == epoch
            what = f"leader again in epoch {epoch}"
        else:
            what = "idle"
        for _ in range(4):
            await asyncio.sleep(0)
        check(step, what)
    if not leader:
        replicas.set_role(0, leader=True, epoch=epoch + 1)
    replicas.advance(part)
    for _ in range(4):
        await asyncio.sleep(0)
    check(steps, "end")
    shard = rt.shard_for("a")
    for g, off in acked.items():
        got = shard.fetch_offsets(g, [("t", [0])])[1][0][1][0].offset
        if got < off:
            raise Violation(f"seed {seed}: group {g} acknowledged {off}, the shard serves {got}")
    for t, _g, _o in tasks:
        t.cancel()
    await rt.shutdown()
    return stats


def run_seed(seed: int, steps: int = 80, bad: str | None = None) -> dict:
    return asyncio.run(_run(seed, steps, bad))


def run_seeds(seeds, steps: int = 80, bad: str | None = None) -> tuple[list[str], dict]:
    failures, total = [], {}
    for s in seeds:
        try:
            st = run_seed(s, steps, bad)
            for k, v in st.items():
                total[k] = total.get(k, 0) + v
        except Violation as e:
            failures.append(str(e))
    return failures, total


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--bad", default=None)
    a = ap.parse_args()
    print(run_seed(a.seed, a.steps, a.bad))
