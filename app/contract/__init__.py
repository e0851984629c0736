"""The wire contract: every record's key and every control record's validation, in one place.

`keys` builds the record key of each topic (event sources and principals, configs,
directives and allocations); `directives` and `allocations` say what a valid control record
is, with one error type and its countable reasons; `entities` names a quota entity. Every writer and reader of these formats
takes them from here (the workers, the gateway, the subscriber, the audit, the admin tools), so
a format is changed in one module. The event and config records themselves are validated by the
engine (`app.engine.events`, `app.engine.configs`), which the workers, `replay` and the audit
judge with.

Pure like the engine (no Faust, Kafka client, clock or randomness); it imports the engine only.
"""
