"""One TLS context per process for the harness's httpx calls.

httpx builds a new SSL context, loading the whole CA bundle, for every `httpx.get/post/stream`
call and every Client: 30-37 ms of CPU each, measured on the 2-core box. A launch asks its
loopback server many times (the /metrics timeline every 2 s, readiness, the engine's identity,
the server's counters around the smoke), a fitness run once a request. httpx's own default context, built once and handed
over as `verify=tls()`, verifies exactly as before; an SSLContext is meant to be shared.
"""

from __future__ import annotations

import functools
import os
import ssl

import httpx


def tls() -> ssl.SSLContext:
    # httpx reads these two at every call (trust_env): a changed bundle is a new context.
    return _context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _context(_cert_file: str | None, _cert_dir: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context()
