"""What operators and other services run besides the daemon: phase 1, the orphan scanner, purge-topic, queue read-
outs. May import: worker.daemon and below.
"""
