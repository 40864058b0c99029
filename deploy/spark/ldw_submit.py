"""The nightly jobs' entry point for ``spark-submit``: the ``ledger-deletion-worker`` command line, with the
``worker`` package shipped as ``--py-files`` (``make spark-package``: dist/ledger_deletion_worker.zip).

    spark-submit --master spark://HOST:7077 --py-files dist/ledger_deletion_worker.zip \\
        deploy/spark/ldw_submit.py replay-dlq --config worker.yaml

Everything after the script is the command line of ``ledger-deletion-worker`` (``replay-dlq``, ``audit``).
Without ``--master`` the jobs run on spark-submit's master. Kept out of the repository's root on purpose:
Python puts the script's directory first on the driver's path, and no ``worker`` package lives here.
"""

import sys

from worker.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
