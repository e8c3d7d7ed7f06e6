"""Code generator: Kafka JSON message schemas -> kbroker/wire/generated/*.py.

schema.py (locate + parse JSON), model.py (types, versions, names), emit_python.py (one module
per message), emit_registry.py (registry.py, error codes), cli.py (`--check`).
"""
