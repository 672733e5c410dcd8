"""Agent traces: a run's own sessions, read from its wire log, replayed as load (issue 37)."""
