"""Tests on the cluster profile of the local stack (a package: its fixtures end with its last test)."""
