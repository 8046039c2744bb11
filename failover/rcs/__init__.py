"""The parts of ConfigurationServerCore (the RCS core): failover/server_core.py names them in
order and routes to them. Pure, like the facade: no I/O, fed the time."""
