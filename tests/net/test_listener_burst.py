"""A burst of new connections is accepted a few at a time: other callbacks run between."""

import asyncio
import socket

from kbroker.net.listener import Listener
from kbroker.wire.frame import FrameDecoder


class _Nothing:
    def dispatch(self, conn, frame):
        return None


def test_burst_of_connections_is_accepted_in_slices():
    async def main():
        lst = Listener("PLAINTEXT", "127.0.0.1", 0, _Nothing(), lambda: FrameDecoder(1 << 20), backlog=512)
        lst.start()
        n = 80
        clients = [socket.create_connection(("127.0.0.1", lst.bound_port)) for _ in range(n)]
        seen = []   # connections accepted so far, each time another callback got the loop

        async def other():
            while len(lst.connections) < n:
                seen.append(len(lst.connections))
                await asyncio.sleep(0)

        await asyncio.wait_for(other(), 10)
        for c in clients:
            c.close()
        await lst.shutdown(1)
        return seen

    seen = asyncio.run(main())
    steps = sorted(set(seen))
    # the other task ran between accept batches of at most 16 (at ~0.1-0.3 ms each, a few ms)
    assert len(steps) >= 5
    assert all(b - a <= 16 for a, b in zip(steps, steps[1:]))
