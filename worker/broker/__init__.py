"""Pulsar: its admin API and binary client, the deletion topics' topology, start-up checks and the owner's live
state cached per topic. May import: worker.backends and below.
"""
