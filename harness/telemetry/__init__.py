"""The telemetry store of an observability mission: an OTLP/HTTP receiver writing to
DuckDB (`receiver`, with `otlp` turning requests into rows and `readonly` the one way SQL
is run on the store), its schema (`schema`), and the agent's `obs` query CLI (`obs`,
standing on `obs_store`, with `obs_metrics` and `series` for metrics)."""
