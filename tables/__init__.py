"""tables: the worker's state layer, the entity-windows table's write-back cache
(`entity_state`) and its RocksDB access (`faust_store`).

It imports app.engine only (the state objects and their codec): nothing generic lives here.
"""
