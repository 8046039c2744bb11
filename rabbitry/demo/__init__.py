"""The `rabbitry demo` building blocks: a set of Redis servers, generated input, a timeline of
what happened (with a plot), a live terminal view and the exactly-once report.

Each module does one job and knows nothing of the others' internals; `rabbitry.demo.run` puts
them together.
"""
