"""Simulated brokers and clients for closing the loop with the live pipeline.

The model (`scenario`, `broker`, `clients`, `world`, `meter`, `offline`) is pure and takes time
as an argument; `live`, `view` and `session` are the thin Kafka and process I/O around it.
`quota-streams simulate` and `quota-streams demo` are built on it; see docs/simulator.md.

It may import the product packages (engine, intake, kafka, subscriber, usage, enforcement, the
audit's percentiles, admin's config records), `app.settings`, `app.signing`, `app.errors` and
the dev stack (`session` runs on its launcher); never the commands.
"""
