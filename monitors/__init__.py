"""Layer 2: what a node knows about other nodes (dist, node_monitor, bus, gossip)."""
