"""Simulated brokers and clients for closing the loop with the live pipeline.

The model (`scenario`, `broker`, `clients`, `world`, `meter`, `offline`) is pure and takes time
as an argument; `live`, `view` and `session` are the thin Kafka and process I/O around it.
`quota-streams simulate` and `quota-streams demo` are built on it; see docs/simulator.md.
"""
