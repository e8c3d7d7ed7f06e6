"""Producer id blocks on a broker: handed out in order, the next block fetched when 90% of
the current one is used, one request at a time, nothing reused after a failed fetch."""

import asyncio

from kbroker.broker.producer_ids import ProducerIdBlocks, ProducerIdManager


def test_blocks_prefetch_at_ninety_percent_and_switch_over():
    b = ProducerIdBlocks()
    assert b.take() is None and b.wants_block()
    b.requesting = True
    assert not b.wants_block()              # one request at a time
    b.on_block(1000, 1000)
    got = [b.take() for _ in range(899)]
    assert got == list(range(1000, 1899)) and not b.wants_block()
    assert b.take() == 1899 and b.wants_block()   # 100 left: fetch the next one
    b.requesting = True
    b.on_block(5000, 1000)
    assert b.prefetched == (5000, 1000) and not b.wants_block()
    rest = [b.take() for _ in range(100)]
    assert rest == list(range(1900, 2000))
    assert b.take() == 5000 and b.prefetched is None   # the reserve becomes current


def test_manager_prefetches_in_the_background_and_shares_one_request():
    calls = []

    async def allocate(broker_id, broker_epoch):
        calls.append((broker_id, broker_epoch))
        await asyncio.sleep(0.01)
        return 1000 * len(calls), 1000

    async def main():
        m = ProducerIdManager(None, 7, 3, allocate=allocate)
        ids = await asyncio.gather(*(m.next_id() for _ in range(5)))
        assert sorted(ids) == list(range(1000, 1005)) and len(calls) == 1
        for _ in range(895):
            assert m.next_id_nowait() is not None
        await asyncio.sleep(0.05)           # the prefetch ran meanwhile
        assert len(calls) == 2 and m.blocks.prefetched == (2000, 1000)
        more = [m.next_id_nowait() for _ in range(101)]
        assert more[-1] == 2000 and None not in more
        assert calls == [(7, 3), (7, 3)]

    asyncio.run(main())


def test_a_failed_fetch_is_retried_by_the_next_caller():
    answers = [RuntimeError("controller moved"), (0, 1000)]

    async def allocate(broker_id, broker_epoch):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    async def main():
        m = ProducerIdManager(None, 1, 1, allocate=allocate)
        try:
            await m.next_id()
        except RuntimeError:
            pass
        else:
            raise AssertionError("the failure should reach the caller")
        assert await m.next_id() == 0

    asyncio.run(main())
