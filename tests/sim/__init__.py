"""The deterministic simulator: pure cores on simulated nodes, network and virtual time.

engine.Sim hosts cores (CoreKind) on SimNodes and performs their effects; network.Network is
the simulated dist layer; node_monitor hosts NodeMonitorCore; schedules makes seeded fault
schedules; invariants checks partition handling; run replays and shrinks one schedule.
See docs/simulator.md.
"""
