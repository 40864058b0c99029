"""The phase-2 daemon: consume, decide (worker.core) with facts gathered from the backends, settle, serve metrics
and health. May import: worker.broker and below.
"""
