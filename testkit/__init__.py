"""What the tests and the benchmark both need to drive the real local stack: its addresses
(:mod:`testkit.stack`), the worker daemon as a subprocess and real BookKeeper ledgers made with
BookKeeper's own Java client (:mod:`testkit.harness`). Needs a checkout of the repository (the
stack script and the Java sources live there), not just the installed package."""
