"""Azure Resource Manager access for the azure stack: settings, the credential, the
subscription, the Container Apps client, and ARM errors turned into plain sentences.

Credentials come from `DefaultAzureCredential` (an `az login`, a service principal in
AZURE_* variables, a managed identity, ...) and are never stored. Every call is bounded:
the SDK's retry policy honours Retry-After on 429/5xx for a fixed number of tries, and
every connection has a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
)
from azure.core.pipeline.policies import RetryPolicy
from azure.core.rest import HttpRequest
from azure.identity import DefaultAzureCredential
from azure.mgmt.appcontainers import ContainerAppsAPIClient

ARM_SCOPE = "https://management.azure.com/.default"
GUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
SUBSCRIPTIONS_API = "2022-12-01"
RESOURCE_GROUPS_API = "2021-04-01"


@dataclass(frozen=True)
class AzureSettings:
    """Where ARM is and how patient to be. The defaults are Azure's; the variables exist
    so a loopback ARM stand-in (tests, demos) can take Azure's place."""

    arm_endpoint: str = "https://management.azure.com"
    ingress_scheme: str = "https"  # the app's ingress always speaks TLS on Azure
    public_ip_url: str = "https://api.ipify.org"
    ready_timeout_s: float = 30 * 60  # vllm-on-tap's bound: image pull + weights
    poll_s: float = 10.0  # LRO polling (when ARM sends no Retry-After) and app status
    retries: int = 6  # per ARM request, on 408/429/5xx and connection errors

    @classmethod
    def from_env(cls) -> "AzureSettings":
        env = os.environ
        return cls(
            arm_endpoint=env.get("LLMS_BENCHMARK_ARM_ENDPOINT", cls.arm_endpoint).rstrip("/"),
            ingress_scheme=env.get("LLMS_BENCHMARK_AZURE_INGRESS_SCHEME", cls.ingress_scheme),
            public_ip_url=env.get("LLMS_BENCHMARK_PUBLIC_IP_URL", cls.public_ip_url),
            ready_timeout_s=float(env.get("LLMS_BENCHMARK_AZURE_READY_TIMEOUT_S", cls.ready_timeout_s)),
            poll_s=float(env.get("LLMS_BENCHMARK_AZURE_POLL_S", cls.poll_s)),
        )


class CappedRetryPolicy(RetryPolicy):
    """Retry-After is honoured up to `cap_s`: a throttled call never sleeps longer than that
    per try, and the tries are counted (`retry_total`/`retry_status`)."""

    def __init__(self, cap_s: float = 120.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cap_s = cap_s
        self.retried: list[str] = []  # each retry the SDK made, "PUT 503" (issue 61: on the record)

    def increment(self, settings, response=None, error=None) -> bool:
        try:
            request = (response.http_request if response is not None else None)
            status = response.http_response.status_code if response is not None else type(error).__name__
            self.retried.append(f"{getattr(request, 'method', '?')} {status}")
            del self.retried[:-200]  # bounded
        except Exception:  # noqa: BLE001 - a count never stands in the way of a retry
            pass
        return super().increment(settings, response=response, error=error)

    def get_retry_after(self, response) -> float | None:
        after = super().get_retry_after(response)
        return None if after is None else min(after, self.cap_s)


def credential() -> DefaultAzureCredential:
    return DefaultAzureCredential(process_timeout=30)


def client(cred, subscription_id: str, settings: AzureSettings) -> ContainerAppsAPIClient:
    retry = CappedRetryPolicy(retry_total=settings.retries, retry_status=settings.retries,
                        retry_connect=3, retry_read=3, retry_backoff_factor=0.8, retry_backoff_max=30,
                        timeout=15 * 60)
    arm = ContainerAppsAPIClient(
        cred, subscription_id, base_url=settings.arm_endpoint,
        polling_interval=settings.poll_s, retry_policy=retry,
        connection_timeout=30, read_timeout=120,
    )
    arm.llms_retries = retry  # the SDK's own retries, read by the stack for the record
    return arm


def get_json(arm: ContainerAppsAPIClient, path: str, api_version: str) -> dict | None:
    """GET an ARM path outside the Container Apps API (resource groups, subscriptions)
    through the same pipeline (auth, retries). None on 404."""
    resp = arm.send_request(HttpRequest("GET", f"{path}?api-version={api_version}"))
    if resp.status_code == 404:
        return None
    if resp.status_code == 401:
        raise ClientAuthenticationError(message=_body_message(resp) or "401 Unauthorized", response=resp)
    if resp.status_code >= 400:
        raise HttpResponseError(message=_body_message(resp) or f"HTTP {resp.status_code}", response=resp)
    return resp.json()


def _body_message(resp) -> str:
    try:
        err = resp.json().get("error") or {}
    except ValueError:
        return resp.text()[:300]
    return f"({err.get('code')}) {err.get('message')}" if err else ""


def describe(exc: Exception) -> str:
    """An ARM error as one line: status, code and message, never a token or a body dump."""
    if isinstance(exc, HttpResponseError):
        status = getattr(exc, "status_code", None)
        err = getattr(exc, "error", None)
        code = getattr(err, "code", None)
        message = getattr(err, "message", None) or exc.message or str(exc)
        message = message.strip().splitlines()[0] if message.strip() else message
        # A failed LRO carries the 200 of its status poll: only an error status says anything.
        parts = [f"HTTP {status}" if status and status >= 400 else None, f"({code})" if code and f"({code})" not in message else None,
                 message]
        return " ".join(p for p in parts if p)
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def resolve_subscription(cred, configured: str | None, settings: AzureSettings) -> str:
    """The subscription id: `config.subscription` (an id, or a name looked up over ARM),
    else AZURE_SUBSCRIPTION_ID, else the Azure CLI's default (`az account show`),
    else the only subscription the credential sees. Raises LookupError with the reason."""
    if configured:
        if GUID.match(configured):
            return configured
        subs = _list_subscriptions(cred, settings)
        for sub in subs:
            if sub.get("displayName") == configured:
                return sub["subscriptionId"]
        for sub in subs:
            if (sub.get("displayName") or "").casefold() == configured.casefold():
                return sub["subscriptionId"]
        names = ", ".join(sorted(s.get("displayName", "?") for s in subs)) or "none"
        raise LookupError(f"no subscription named '{configured}' is visible to this credential (visible: {names})")
    if os.environ.get("AZURE_SUBSCRIPTION_ID"):
        return os.environ["AZURE_SUBSCRIPTION_ID"]
    az = shutil.which("az")
    if az:
        try:
            out = subprocess.run([az, "account", "show", "--query", "id", "-o", "tsv"], capture_output=True,
                                 text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise LookupError(f"`az account show` failed: {exc}") from exc
        sub = out.stdout.strip()
        if out.returncode == 0 and GUID.match(sub):
            return sub
        raise LookupError(f"`az account show` gave no default subscription ({out.stderr.strip()[:200]})")
    subs = _list_subscriptions(cred, settings)
    if len(subs) == 1:
        return subs[0]["subscriptionId"]
    raise LookupError(f"the credential sees {len(subs)} subscriptions and none is chosen")


def _list_subscriptions(cred, settings: AzureSettings) -> list[dict]:
    # The subscriptions list is tenant-level: the client's own subscription id is unused here.
    with client(cred, "00000000-0000-0000-0000-000000000000", settings) as arm:
        body = get_json(arm, "/subscriptions", SUBSCRIPTIONS_API) or {}
    return [s for s in body.get("value", []) if s.get("state", "Enabled") == "Enabled"]
