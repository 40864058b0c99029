"""The pure rules: what may be deleted, decided from facts. Imports nothing that does I/O (no aiohttp,
kazoo, aiobotocore, pulsar or prometheus client): every module here is one rule, named after it, and every
caller (daemon, replay, scan, audit, purge) uses that one."""
