"""The gateway: a Kafka wire-protocol proxy in front of any Kafka-protocol cluster that measures
its clients like a broker (usage events) and throttles them like one (directives from the
workers, and its own engine on its own traffic).

Modules: `frames` (framing, headers), `apis` (what is known of each API), `messages` (the few
messages decoded or written, with kio), `sasl` (principals), `authentication` (a connection's
SASL exchange, followed), `limits` (what a connection is held to, why one is closed), `nodes`
(the port rule), `policy` (the enforcement rules, pure), `local` (the engine as a driver),
`mutations` (KIP-599 requests), `connection` (one client connection), `server` (listeners,
admission, events), `metrics`, `tls`.
docs/gateway.md is the guide.
"""
