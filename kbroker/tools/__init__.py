"""``kbroker`` operator tools, one module each, with the flags of their Kafka counterparts
(``kafka-topics.sh`` -> ``kbroker topics``...). Each module has ``add_parser(sub)``, which
sets ``tool_main`` on its arguments; ``kbroker.cli`` runs it."""
