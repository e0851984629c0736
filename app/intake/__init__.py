"""The intake: record bytes in, validated samples (columns), dead letters and routes out.

Pure like the engine and beside it (no Faust, Kafka or clock import): `records` decodes and
validates, `columnar` is the columnar batch format, `clock` the stream clock, `routes` where
each sample's windows live, `deadletter` the shape every dead letter has, `newest_configs` the
rule that a config older than the newest of its key is refused; `apply` the one order every
driver runs samples through the engine in; `files` the opener of the input files the offline
drivers read (its only file access).

It imports the engine and itself only.
"""
