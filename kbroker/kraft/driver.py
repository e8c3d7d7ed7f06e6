"""RaftDriver: runs a RaftNode under asyncio (one task; deadlines become timers).

    driver = RaftDriver(node, transport, clock=monotonic_ms)
    await driver.start()
    offset = await driver.append([framed_record, ...])     # resolves once committed (HW)
    response = await driver.handle_request(src_node_id, request_obj)   # server side
    driver.add_listener(fn)     # fn(CommittedBatch | SnapshotLoaded), in log order
    await driver.close()        # a leader resigns (EndQuorumEpoch) before stopping

(Skeleton published for the ctrl helper; the implementation follows in this module.)
"""
