"""Telemetry in one step: the OpenTelemetry SDK set up to send the guard's spans over OTLP/HTTP.

Two ways, both through the OTel SDK's own configuration (no budgetlens-specific variables):

- **The environment only.** When ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set and the process has no tracer provider yet, the
  first ``RunBudget`` sets one up (``auto_configure``): a ``TracerProvider`` with a batching
  OTLP/HTTP exporter. The exporter reads ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` is
  appended), ``OTEL_EXPORTER_OTLP_HEADERS`` (``key=value,...``, e.g. an authorization header) and
  the other ``OTEL_EXPORTER_OTLP_*`` variables; the resource reads ``OTEL_SERVICE_NAME`` and
  ``OTEL_RESOURCE_ATTRIBUTES``. ``OTEL_SDK_DISABLED=true`` turns it off.
- **One call.** ``budgetlens.configure(endpoint=..., headers=..., service_name=...,
  resource_attributes=...)``: the same set-up with arguments that win over the environment.

Needs the ``otlp`` extra (``pip install 'budgetlens[otlp]'``: opentelemetry-exporter-otlp-proto-http).
Spans are flushed when the process exits (the SDK's own exit hook). A process that already set
a tracer provider (its own OTel set-up) is left as it is: ``auto_configure`` does nothing and
``configure`` adds its exporter to that provider.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from budgetlens.config import (
    ENV_OTEL_EXPORTER_OTLP_ENDPOINT,
    ENV_OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    ENV_OTEL_SDK_DISABLED,
    env_value,
)

log = logging.getLogger(__name__)

__all__ = ["auto_configure", "configure"]

#: The path the OTLP/HTTP trace endpoint takes under a base URL (OTLP spec).
TRACES_PATH = "/v1/traces"
_lock = threading.Lock()
_auto_checked = False


def _traces_url(endpoint: str) -> str:
    """``endpoint`` as the trace URL: ``http://host:4318`` -> ``http://host:4318/v1/traces``."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def configure(
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    service_name: str | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
) -> Any:
    """Send budgetlens' spans (and every other OTel span of the process) to an OTLP/HTTP collector.

    ``endpoint``: the collector's base URL (``http://127.0.0.1:4318``; ``/v1/traces`` is
    appended) or its full trace URL; None = ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``. ``headers`` (e.g.
    ``{"Authorization": "Bearer ..."}``): None = ``OTEL_EXPORTER_OTLP_HEADERS``.
    ``service_name`` and ``resource_attributes`` win over ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES``, which are merged in. Returns the SDK ``TracerProvider`` that
    now exports (the global one). Raises ImportError naming the ``otlp`` extra when
    opentelemetry-exporter-otlp-proto-http is not installed.
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as error:
        raise ImportError(
            "budgetlens telemetry needs the OTLP exporter: pip install 'budgetlens[otlp]'"
        ) from error
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = OTLPSpanExporter(
        endpoint=_traces_url(endpoint) if endpoint else None,
        headers=dict(headers) if headers is not None else None,
    )
    with _lock:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):  # the process set up OTel itself: add to it
            current.add_span_processor(BatchSpanProcessor(exporter))
            return current
        attributes = dict(resource_attributes or {})
        if service_name:
            attributes[SERVICE_NAME] = service_name
        provider = TracerProvider(resource=Resource.create(attributes))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        return provider


def auto_configure() -> bool:
    """Set up OTLP export from the standard environment, once per process, when
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, the SDK is
    not disabled and no tracer provider is set yet. Returns True when it configured export now.
    Never raises: without the ``otlp`` extra it logs one warning naming it."""
    global _auto_checked
    if _auto_checked:
        return False
    _auto_checked = True
    if not (env_value(ENV_OTEL_EXPORTER_OTLP_ENDPOINT) or env_value(ENV_OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)):
        return False
    if (env_value(ENV_OTEL_SDK_DISABLED) or "").strip().lower() == "true":
        return False
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the process configured OTel itself
    try:
        configure()
    except ImportError as error:
        log.warning("%s; OTEL_EXPORTER_OTLP_ENDPOINT is set but no span is sent", error)
        return False
    except Exception as error:  # never into the agent loop
        log.warning("budgetlens: OTLP export from the environment could not be set up: %s", error)
        return False
    return True
