"""Latency tables: the timing protocol, building a table, checking it, packs and runners for devices without Python."""
