"""Serving load benchmark: closed-loop load, /metrics sampling, results and plots."""
