"""The webhook sink: POST the compact summary (with a plain-text `text` field for
Slack-style receivers) to the URL held in an environment variable named by the config.

A 429 waits as its Retry-After says (clamped to [retry_after_min_s, retry_after_max_s];
the default when it says nothing usable), up to `attempts` tries; a 5xx or a connection
error is retried the same way. Any failure is a warning quoting the response body: it
never changes the exit code. The URL is never printed (it often carries a token).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from harness.fitness.config import WebhookCfg
from harness.fitness.report import summary
from harness.fitness.retry import retry_after  # noqa: F401  (one policy: seconds or a date, clamped)
from harness.wire.tls import tls

BODY_QUOTE = 300


def post(url: str, payload: dict[str, Any], cfg: WebhookCfg, *,
         sleep: Callable[[float], None] = time.sleep) -> str | None:
    """None when delivered, else the warning (with the last response body)."""
    last = "no attempt"
    for attempt in range(1, cfg.attempts + 1):
        try:
            resp = httpx.post(url, json=payload, timeout=cfg.timeout_s, verify=tls())
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
            if attempt < cfg.attempts:
                sleep(retry_after(None, cfg))
            continue
        if resp.status_code < 300:
            return None
        last = f"HTTP {resp.status_code}: {resp.text[:BODY_QUOTE]}"
        if resp.status_code == 429 or resp.status_code >= 500:
            if attempt < cfg.attempts:
                sleep(retry_after(resp.headers.get("Retry-After"), cfg))
            continue
        break  # another 4xx will not change by retrying
    return f"webhook POST failed after {attempt} attempt(s): {last}"


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
