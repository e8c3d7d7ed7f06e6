"""The classic rebalance protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)."""
