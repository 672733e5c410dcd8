"""A run's trajectory in the field's interchange formats: ATIF out (`atif_out`, built from the
run folder's own files by `sources`), OpenTelemetry GenAI spans out (`otel`), and ATIF in as
load (`atif_in`)."""
