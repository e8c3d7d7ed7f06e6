"""Broker assembly: storage formatting, the broker object that ties config, metadata, logs,
handlers and listeners together (see ``kbroker.server``)."""
