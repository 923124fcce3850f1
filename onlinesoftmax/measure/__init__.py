"""Measurement: the one timer (timer), results with provenance (results), benchmark helpers (bench)."""
