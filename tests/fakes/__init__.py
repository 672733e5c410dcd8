"""Loopback stand-ins for external services the tests talk to."""
