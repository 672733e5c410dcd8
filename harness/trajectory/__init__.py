"""A run's trajectory in the field's interchange formats: ATIF out (`atif_out`, built from the
run folder's own files by `sources`) and OpenTelemetry GenAI spans out (`otel`). ATIF in, as
load, is one of load's input formats (`harness.load.agents.atif`)."""
