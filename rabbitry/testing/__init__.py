"""Testing helpers for clusters of real node processes.

- `launcher`: start OS processes, wait for their ready line, always tear them down.
- `faultproxy`: a Toxiproxy-compatible fault-injection proxy (`rabbitry faultproxy`).
- `cluster` and `plugin`: the `cluster(n, ...)` pytest fixture, with a proxy on every directed
  link (load it with `-p rabbitry.testing.plugin`; see docs/testing.md).
"""
