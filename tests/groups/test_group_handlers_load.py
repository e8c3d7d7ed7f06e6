"""The group handler modules declare version ranges the schemas support."""
from kbroker.handlers import registry

GROUP_HANDLERS = ("find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit",
                  "offset_fetch", "offset_delete", "list_groups", "describe_groups", "delete_groups",
                  "consumer_group_heartbeat", "consumer_group_describe")


def test_group_handlers_register():
    specs = registry.load(GROUP_HANDLERS)
    assert {s.name for s in specs.values()} >= {"JoinGroup", "SyncGroup", "ConsumerGroupHeartbeat", "OffsetCommit"}
    assert specs[11].max_version == 9 and specs[8].max_version == 9 and specs[68].max_version == 1
