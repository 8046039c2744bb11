"""Layer 3: Beetle-style coordinated Redis failover. (Not built yet.)"""
