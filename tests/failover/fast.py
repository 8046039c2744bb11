"""Fast timing for failover tests: checks every 0.2 s, answers within 2 s (the shells' Redis
calls take up to 1 s on a hung server, so client_timeout stays above that)."""

FAST_RCS = {
    "master_retries": 2,
    "master_retry_interval": 0.2,
    "client_timeout": 2.0,
    "reconfigure_interval": 1.0,
    "client_heartbeat_interval": 0.5,
}
FAST_RCC = {"heartbeat_interval": 0.5}
