"""What brokers measure, as contract events: recorded, batched and published to the event topics.

The simulated brokers and the gateway both measure usage the way a broker would; this package is
what they share, so both send the same records: `UsageRecorder` (events of one flush interval,
optionally pre-aggregated) and `EventPublisher` (those batches onto the event topics).
"""
