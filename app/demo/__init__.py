"""`quota-streams demo`: real client processes through gateways in front of the broker, and a
live view of what they get. `spec` reads the demo file, `run` starts and follows the clients,
`view` draws the tables.

It may import the engine, `app.kafka` (its connections' security), `app.subscriber`, `app.sim`
and `app.clients`; only the `demo` command imports it.
"""
