"""Broker pub/sub for gossip and failover: memory://, redis://, amqp://. (Not built yet.)"""
