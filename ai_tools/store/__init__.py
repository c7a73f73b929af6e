"""Persistence: the IStore contract implemented in memory and on SQLite (adbapi)."""
