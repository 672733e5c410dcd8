"""OpenTelemetry setup shared by the shop services: traces, metrics, logs and CPU profiles."""

from __future__ import annotations

import logging
import os
import socket
import uuid

from opentelemetry import metrics, trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from opentelemetry.util.re import parse_env_headers

from shop_telemetry.profiler import StackSampler

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
# Semantic-conventions buckets for durations in seconds (the SDK's default ones are for milliseconds).
SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]


class Telemetry:
    def __init__(self, service_name: str) -> None:
        self.service_name = service_name
        self.endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
        self.resource = Resource.create(
            {
                "service.name": service_name,
                "service.version": "1.4.0",
                "service.instance.id": str(uuid.uuid4()),
                "host.name": socket.gethostname(),
                "deployment.environment.name": os.environ.get("DEPLOYMENT_ENV", "local"),
            }
        )
        self.tracer_provider = TracerProvider(resource=self.resource)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{self.endpoint}/v1/traces"), schedule_delay_millis=1000)
        )
        trace.set_tracer_provider(self.tracer_provider)

        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{self.endpoint}/v1/metrics"),
            export_interval_millis=int(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "5000")),
        )
        self.meter_provider = MeterProvider(resource=self.resource, metric_readers=[reader])
        metrics.set_meter_provider(self.meter_provider)

        self.logger_provider = LoggerProvider(resource=self.resource)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{self.endpoint}/v1/logs"), schedule_delay_millis=1000)
        )
        set_logger_provider(self.logger_provider)
        root = logging.getLogger()
        root.setLevel(logging.INFO)
        root.addHandler(LoggingHandler(level=logging.INFO, logger_provider=self.logger_provider))
        if not any(isinstance(h, logging.StreamHandler) for h in root.handlers):
            stream = logging.StreamHandler()
            stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            root.addHandler(stream)

        for noisy in ("httpx", "httpx2", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)

        headers = parse_env_headers(os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", ""), liberal=True)
        self.profiler = StackSampler(service_name, f"{self.endpoint}/v1/profiles", headers=headers)
        self.profiler.start()

    def shutdown(self) -> None:
        self.profiler.stop()
        for provider in (self.tracer_provider, self.meter_provider, self.logger_provider):
            try:
                provider.shutdown()
            except Exception:  # noqa: BLE001
                logging.getLogger(__name__).exception("telemetry shutdown failed")


def setup(service_name: str) -> Telemetry:
    return Telemetry(service_name)
