"""Decorators that shape which calls a replica serves together: `@batch`
(`batch`, with its queue in `batch_queue`) and `@multiplexed` (`multiplex`:
many models, each loaded on a few replicas).

May import: tracing.
"""
