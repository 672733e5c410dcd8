"""The telemetry store of an observability mission: an OTLP/HTTP receiver writing to
DuckDB (`receiver`), its schema (`schema`), and the `obs` query CLI (`obs`)."""
