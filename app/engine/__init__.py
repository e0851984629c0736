"""app.engine: the pure quota engine, Kafka's quota managers over event time, for every driver.

`stats` (Rate, TokenBucket), `kafka_math` (QuotaUtils), `configs` (validation, resolution),
`timeline` (configs on event time), `events` (contract parsing), `allocation`, `batch`, `brief`,
`engine`, `state_codec`, `pickling`. Every module here is compiled (app/engine_build.py).

It imports only the standard library and app.engine: no Faust, Kafka client, clock or
randomness, so the workers, the gateway, replay, the simulator and the Spark audit that all call
it get the same answer.
"""
