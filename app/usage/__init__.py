"""What brokers measure, as contract events: recorded, batched and published to the event topics.

The simulated brokers and the gateway both measure usage the way a broker would; this package is
what they share, so both send the same records: `UsageRecorder` (the events of one flush, request
events as columns, optionally pre-aggregated), `RecordEncoder` (a flush as one record per event
kind within a size bound), `EventPublisher` (those records onto the event topics, keyed by their
source), `charged_name` (names bounded as the workers bound them) and `Drops` (what could not be
delivered, by reason).

It may import the engine, the intake, `app.contract` (the source keys), `app.kafka` and
`app.errors`.
"""
