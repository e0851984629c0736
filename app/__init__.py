"""quota-streams: cluster-wide, replayable, explainable Kafka quotas.

The packages, from the pure core outwards (each package's docstring says what it may import;
tests/unit/project/test_architecture.py holds every package to it):

- `engine` (Kafka's quota managers on event time), `intake` (record bytes to validated
  samples) and `contract` (every record key, the control records' validation): pure, the same
  answer for every driver;
- `kafka`: the Kafka I/O the components share; `tables` (top level): the worker's state;
- `subscriber`, `usage`, `enforcement`: what a broker or the gateway embeds to obey directives,
  measure usage and decide throttles;
- the drivers: `pipeline` (the worker), `gateway`, `audit` (Spark), `sim`; `console` (the
  workers' web console);
- the tools: `admin`, `clients`, `demo`, `commands` (one per CLI command), `devstack` (a local
  Kafka and the launcher that starts the product on it).

The few modules at this level are what every layer shares or what sits outside the layers:
`errors` (errors a user can act on), `signing` (the seal every writer and reader of the control
topics applies), `settings` (the environment, read once, and what is built from it),
`gc_tuning` (the collector settings of every process), `explanation` (the text explaining a
window's decision, which `explain` prints and the console shows), `cli` (the console command) and
`engine_build` (which modules are compiled, read by setup.py before the package is installed,
so standard library only).
"""
