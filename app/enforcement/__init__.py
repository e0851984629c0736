"""What a broker decides about its clients, in one place for the gateway and the simulator.

The gateway enforces on real sockets, the simulator on modelled time; both call these objects,
so a scenario simulated at scale is enforced as the gateway enforces it:

- `connections`: a new connection against the connection quotas (KIP-612) and one listener's
  acceptor queue (hold, close, accept), and the connection event of an accepted one;
- `requests`: a request's throttle from the usage measured (client byte and request quotas);
- `mutations`: the controller mutation quota (KIP-599, strict or permissive by API version),
  topic by topic, and the mutation events of the admitted topics.

Each decision consults the same two sources (`sources.QuotaSources`): the workers' directives and
the local quota managers (`app.enforcement.local.LocalQuotas`). Time is an argument (epoch ms), never
read here, so each is tested with made-up times. These are plain objects with a method per
decision, not a chain of filters: the wire protocol (framing, addresses, principals, the fetch
cap) is the gateway's alone, and what the two enforcers share is these few decisions.

It imports the engine, `app.contract`, `app.subscriber` and `app.usage` only, and is as pure as the engine (no
Faust, Kafka client or clock).
"""
