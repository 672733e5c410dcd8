"""The webhook sink: POST the compact summary (with a plain-text `text` field for
Slack-style receivers) to the URL held in an environment variable named by the config.

A 429 waits as its Retry-After says (clamped to [retry_after_min_s, retry_after_max_s];
the default when it says nothing usable), up to `attempts` tries; a 5xx or a connection
error is retried the same way (harness/wire/retry.py, the one policy). Any failure is a
warning quoting the response body: it never changes the exit code. The URL is never printed (it often carries a token).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from harness.fitness.config import WebhookCfg
from harness.fitness.report import summary
from harness.wire.retry import RETRIED, Busy, Retrier, busy
from harness.wire.tls import tls

BODY_QUOTE = 300


def post(url: str, payload: dict[str, Any], cfg: WebhookCfg, *,
         sleep: Callable[[float], None] = time.sleep) -> str | None:
    """None when delivered, else the warning (with the last response body)."""
    retrier = Retrier(cfg, sleep, transient=lambda exc: "connect" if isinstance(exc, httpx.HTTPError) else None)
    try:
        for attempt in retrier:
            with attempt:
                resp = busy(httpx.post(url, json=payload, timeout=cfg.timeout_s, verify=tls()), RETRIED)
    except Busy as exc:
        resp = exc.response
    except httpx.HTTPError as exc:
        return f"webhook POST failed after {retrier.attempt} attempt(s): {type(exc).__name__}: {exc}"
    if resp.status_code < 300:
        return None
    # another 4xx will not change by retrying
    return f"webhook POST failed after {retrier.attempt} attempt(s): HTTP {resp.status_code}: {resp.text[:BODY_QUOTE]}"


def send(cfg: WebhookCfg, doc: dict[str, Any], say: Callable[[str], None], report_dir=None,
         sleep: Callable[[float], None] = time.sleep) -> str | None:
    """POST the run's summary; a warning (also said) instead of an exception, whatever happens."""
    url = os.environ.get(cfg.url_env or "")
    if not url:
        warning = f"webhook: ${cfg.url_env} is not set; nothing was posted"
    else:
        warning = post(url, summary(doc, report_dir), cfg, sleep=sleep)
    if warning:
        say(f"warning: {warning}")
    else:
        say(f"webhook: summary posted to ${cfg.url_env}")
    return warning
