"""What a process says about itself: log records (`logs`), /metrics
(`exposition`), event-loop gauges (`loop_metrics`) and lock-free metrics
for one loop (`unlocked_metrics`). Tracing is its own room (tracing/).

May import: tracing.
"""
