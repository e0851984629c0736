"""Unit tests: no Kafka, no Spark, no JVM.

Each directory holds the tests of the `app` package of the same name (`bench/` those of the
benchmark scripts); `project/` holds the tests of app's top-level modules (settings, signing,
the compiled build) and those that check the whole tree at once (import rules, deployment
files, hostile input through every driver, the drivers' outputs against their goldens). The
modules here, beside the directories, are what tests of several packages share: fake sockets
and brokers, Kafka frames, a fake producer, the live pipeline's path in one process. Every
directory is a package, so a test module is imported under its full name
(`tests.unit.gateway.test_gateway_session`) wherever it is imported from.
"""
