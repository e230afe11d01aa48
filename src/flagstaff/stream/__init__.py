"""Capture through a replicated NATS JetStream stream, and the consumers that apply it.

With ``--stream-url`` a capture node validates and normalises events as always, then
publishes each accepted batch to the stream (:mod:`.publisher`), one message per shard of the
batch's distinct ids (:mod:`.shards`), and answers 200 once JetStream acknowledged every
message: "200 means durably queued in a replicated stream". ``flagstaff consume`` processes
(:mod:`.consumer`) share the shards through TTL'd leases in a JetStream key-value bucket
(:mod:`.leases`), read each shard in stream order, and write its events, persons and groups to
PostgreSQL through the same ingest transaction as the direct path (:mod:`.apply`), skipping
events whose uuid is stored already, then acknowledge.

Only :mod:`.errors`, :mod:`.shards` and :mod:`.codec` are imported by the capture path's
modules; nats-py is imported when a stream is configured.
"""
