"""The consumer rebalance protocol (KIP-848): server-side assignment, member epochs."""
