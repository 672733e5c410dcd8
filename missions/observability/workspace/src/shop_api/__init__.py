"""The shop catalog API."""
