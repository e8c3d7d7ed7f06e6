"""For tests that show long work yields: run a coroutine while another task counts how often
it got to run meanwhile."""
import asyncio


async def with_ticker(coro):
    """(result of ``coro``, how many times another task ran while it was awaited)."""
    ticks = 0
    done = False

    async def ticker():
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)
    t = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    start = ticks
    try:
        result = await coro
    finally:
        done = True
        await t
    return result, ticks - start
