"""The gateway: a Kafka wire-protocol proxy in front of any Kafka-protocol cluster that measures
its clients like a broker (usage events) and throttles them like one (directives from the
workers, and its own engine on its own traffic).

Modules: `frames` (framing, headers), `apis` (what is known of each API), `messages` (the few
messages decoded or written, with kio), `sasl` (principals), `authentication` (a connection's
SASL exchange, followed), `limits` (what a connection is held to, why one is closed), `nodes`
(the port rule), `mutations` (KIP-599 requests on the wire), `connection` (one client
connection), `server` (listeners, admission, events), `metrics`, `tls`. What it decides about
connections and requests (throttles, the mutation quota, connection quotas, the local quota
managers) is `app.enforcement`, shared with the simulator.
docs/gateway.md is the guide.

It may import `app.enforcement`, `app.usage`, `app.subscriber`, `app.kafka`, the engine,
`app.settings`, `app.signing` and `app.errors`; never a tool (commands, sim, demo, admin) nor
the dev stack.
"""
