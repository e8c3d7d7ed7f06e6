"""A broker's controlled shutdown stops waiting once no other live broker is left to take its
leaderships (a whole cluster stopped at once: the quorum may already be gone)."""
import asyncio

from kbroker.kraft.broker_lifecycle import BrokerLifecycle
from kbroker.kraft.controller_channel import ControllerUnavailable


class NoController:
    """A channel whose every request finds no active controller, after a short wait."""
    def __init__(self):
        self.sent = 0

    async def send(self, req, timeout_ms):
        self.sent += 1
        await asyncio.sleep(0.01)
        raise ControllerUnavailable("no active controller answered")


def _lifecycle(channel):
    return BrokerLifecycle(channel, broker_id=2, cluster_id="c", listeners=[], rack=None,
                           metadata_offset=lambda: 0, heartbeat_interval_ms=10)


def test_ends_when_the_other_brokers_are_gone():
    channel = NoController()

    def others_live():
        return channel.sent < 3          # the others' fencing arrives after three attempts

    async def main():
        return await _lifecycle(channel).controlled_shutdown(10.0, needed=others_live)
    # three tries, where waiting out the 10 s would have made hundreds
    assert asyncio.run(main()) is False and channel.sent == 3


def test_waits_out_its_timeout_while_others_are_live():
    channel = NoController()

    async def main():
        return await _lifecycle(channel).controlled_shutdown(0.3, needed=lambda: True)
    assert asyncio.run(main()) is False
    assert channel.sent > 3
