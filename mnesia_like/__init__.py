"""Layer 3: a Mnesia-like replicated store for cluster state. (Not built yet.)"""
