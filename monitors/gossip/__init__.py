"""LamportClock, LimitedSet, Mingle, Gossip and elections. (Not built yet.)"""
