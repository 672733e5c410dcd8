"""A grader model: an OpenAI-compatible model that proposes a verdict per finding,
with read access to the run's telemetry store and its workspace code."""
