"""AutoTopicCreator: one creation per name at a time, a bounded wait, and errors that a
client retries (the controller it needs may be in the middle of an election)."""

import asyncio
from types import SimpleNamespace

from kbroker.handlers.auto_create import NOT_READY, AutoTopicCreator
from kbroker.wire.errors import Errors


class SlowController:
    """create_topics that answers when released, counting the calls."""

    def __init__(self, error=Errors.NONE, fail=None):
        self.calls = []
        self.release = asyncio.Event()
        self.error = error
        self.fail = fail

    async def create_topics(self, topics):
        self.calls.append([t.name for t in topics])
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return [SimpleNamespace(name=t.name, error=self.error) for t in topics]


def test_a_slow_creation_is_answered_not_ready_in_time_and_shared_by_later_requests():
    async def main():
        ctl = SlowController()
        auto = AutoTopicCreator(ctl.create_topics)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await auto.create(["a"], wait_s=0.2) == {"a": NOT_READY}
        assert 0.2 <= loop.time() - t0 < 1.0
        # a second request while the first creation runs joins it; a new name gets its own
        second = asyncio.ensure_future(auto.create(["a", "b"], wait_s=5))
        await asyncio.sleep(0.05)
        assert ctl.calls == [["a"], ["b"]]
        ctl.release.set()
        assert await second == {"a": NOT_READY, "b": NOT_READY}   # created; the image shows them
        # once finished, asking again starts a new creation (TOPIC_ALREADY_EXISTS, say)
        ctl.error = Errors.TOPIC_ALREADY_EXISTS
        assert await auto.create(["a"], wait_s=1) == {"a": NOT_READY}
        assert ctl.calls[-1] == ["a"] and len(ctl.calls) == 3
    asyncio.run(main())


def test_a_refused_creation_reports_its_error_and_a_failed_one_is_retriable():
    async def main():
        ctl = SlowController(error=Errors.INVALID_REPLICATION_FACTOR)
        ctl.release.set()
        auto = AutoTopicCreator(ctl.create_topics)
        assert await auto.create(["x"]) == {"x": Errors.INVALID_REPLICATION_FACTOR}
        down = SlowController(fail=RuntimeError("no active controller answered"))
        down.release.set()
        auto = AutoTopicCreator(down.create_topics)
        assert await auto.create(["y"]) == {"y": NOT_READY}
        assert auto._inflight == {}
    asyncio.run(main())


def test_close_cancels_creations_still_running():
    async def main():
        ctl = SlowController()
        auto = AutoTopicCreator(ctl.create_topics)
        assert await auto.create(["z"], wait_s=0.05) == {"z": NOT_READY}
        (task,) = auto._tasks
        auto.close()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and not auto._tasks
    asyncio.run(main())
