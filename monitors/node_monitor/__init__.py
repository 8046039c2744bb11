"""The rabbit_node_monitor port: cluster files, partial partitions, partition modes. (Not built yet.)"""
