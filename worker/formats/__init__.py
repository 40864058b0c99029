"""Wire and storage formats, parsed without I/O: topic names, the deletion message, Pulsar's and BookKeeper's
metadata records. May import: the standard library, fastavro, worker.errors.
"""
