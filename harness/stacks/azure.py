"""`azure` (vllm-on-tap's `aca`): vLLM as a Container App on Azure Container Apps
serverless GPU (`gpu-a100` = `Consumption-GPU-NC24-A100`, one A100 80 GB).

Serve creates the app `vot-<preset>` exactly as vllm-on-tap does (one fixed replica,
external ingress on port 8000 open to the caller's public IP only, a fresh API key as
the app secret `vllm-api-key` exposed to vLLM as `VLLM_API_KEY`). The key is never
written anywhere: clients read it from the app (`listSecrets`) when they need it.
Destroy deletes the app and confirms it is gone; the Container Apps environment, its
GPU profile and the cache storage stay (they are vllm-on-tap's, made by `/vot-config`).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.identity import CredentialUnavailableError

from harness.errors import PreflightError, StackError
from harness.records.paths import ProjectPaths
from harness.records.record import utcnow
from harness.stacks.vllm_log import kv_facts
from harness.stacks import azure_arm
from harness.stacks.azure_arm import ARM_SCOPE, RESOURCE_GROUPS_API, AzureSettings, describe, get_json
from harness.stacks.azure_logs import CRASH_LOOP, REVISION_FAILED, LogFollower
from harness.stack_specs.azure import DEFAULT_IMAGE, DEFAULT_RESOURCE_GROUP, VLLM_PORT
from harness.stacks.base import GpuCell, Unit, file_logs, unit_name
from harness.vot import render
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset
from harness.wire.retry import NOT_OK, Busy, Retrier, Steady, busy
from harness.wire.tls import tls

GPU_PROFILE = "gpu-a100"
GPU_PROFILE_TYPE = "Consumption-GPU-NC24-A100"
GPU_MEMORY_GB = 80
GPU_CELL = GpuCell("A100 80 GB", 1)
KEY_SECRET = "vllm-api-key"
CACHE_STORAGE = "vot-cache"
COLLECTOR_APP = "otel-collector"
DESTROY_TIMEOUT_S = 15 * 60
QUOTA_NAME = "Managed Environment Consumption NCA100 GPUs"


@dataclass(frozen=True)
class AzureTarget:
    """What preflight found: where the app goes. Resolved at each serve, never stored in files
    (except the ids destroy needs, in the ledger)."""

    subscription_id: str
    resource_group: str
    environment_name: str
    environment_id: str
    location: str
    default_domain: str
    internal: bool
    caller_ip: str | None
    cache: bool
    collector_fqdn: str | None
    image: str


def app_body(target: AzureTarget, preset: ResolvedPreset, api_key: str) -> dict:
    """The ARM body of `vot-<preset>`: vllm-on-tap's, field for field."""
    args = [preset.model, "--served-model-name", preset.served_name, "--port", str(VLLM_PORT),
            *render.argv(preset.vllm_args)]
    env: list[dict] = [{"name": "VLLM_API_KEY", "secretRef": KEY_SECRET}]
    app_secrets = [{"name": KEY_SECRET, "value": api_key}]
    for var in preset.env:  # e.g. HF_TOKEN → the secret hf-token, read from this shell
        secret = var.lower().replace("_", "-")
        app_secrets.append({"name": secret, "value": os.environ[var]})
        env.append({"name": var, "secretRef": secret})
    container: dict = {"name": "vllm", "image": target.image, "args": args, "env": env,
                       "resources": {"cpu": 24, "memory": "220Gi"}}
    template: dict = {"containers": [container], "scale": {"minReplicas": 1, "maxReplicas": 1}}
    if target.cache:
        args += ["--safetensors-load-strategy", "prefetch"]  # CIFS is not seen as a network FS
        env += [{"name": "HF_HOME", "value": "/vot-cache/huggingface"},
                {"name": "VLLM_CACHE_ROOT", "value": "/vot-cache/vllm"}]
        container["volumeMounts"] = [{"volumeName": CACHE_STORAGE, "mountPath": "/vot-cache"}]
        template["volumes"] = [{"name": CACHE_STORAGE, "storageType": "AzureFile", "storageName": CACHE_STORAGE,
                                "mountOptions": "mfsymlinks,nobrl"}]
    if target.collector_fqdn:
        args += ["--otlp-traces-endpoint", f"http://{target.collector_fqdn}/v1/traces"]
        env += [{"name": "OTEL_SERVICE_NAME", "value": unit_name(preset.name)},
                {"name": "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "value": "http/protobuf"},
                {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": f"vot.preset={preset.name},vot.stack=azure"}]
    # allowInsecure must be explicit (false: vLLM is reached over TLS only).
    ingress: dict = {"external": True, "targetPort": VLLM_PORT, "transport": "auto", "allowInsecure": False}
    if not target.internal and target.caller_ip:
        bits = 32 if ipaddress.ip_address(target.caller_ip).version == 4 else 128
        ingress["ipSecurityRestrictions"] = [
            {"name": "caller", "ipAddressRange": f"{target.caller_ip}/{bits}", "action": "Allow"}]
    return {
        "location": target.location,
        "tags": {"managed-by": "llms-benchmark", "vot-preset": preset.name},
        "properties": {
            "environmentId": target.environment_id,
            "workloadProfileName": GPU_PROFILE,
            "configuration": {"activeRevisionsMode": "Single", "ingress": ingress, "secrets": app_secrets},
            "template": template,
        },
    }


class AzureStack:
    name = "azure"
    probe_long_cap: int | None = None

    def __init__(self, root: Path, settings: AzureSettings | None = None) -> None:
        self.root = root
        self.run_dir = ProjectPaths(root).unit_run_dir
        self.settings = settings or AzureSettings.from_env()
        self.ready_timeout_s = self.settings.ready_timeout_s
        self._cred = None
        self._clients: dict[str, object] = {}
        self._target: AzureTarget | None = None
        self._followers: dict[str, LogFollower] = {}

    @property
    def target(self) -> AzureTarget | None:
        """What the last preflight resolved (None before one)."""
        return self._target

    # -- ARM ------------------------------------------------------------------------------
    def _credential(self):
        if self._cred is None:
            self._cred = azure_arm.credential()
        return self._cred

    def _arm(self, subscription_id: str):
        if subscription_id not in self._clients:
            self._clients[subscription_id] = azure_arm.client(self._credential(), subscription_id, self.settings)
        return self._clients[subscription_id]

    def fatal_patterns(self) -> tuple[str, ...]:
        return ("EngineCore failed to start", "Engine core initialization failed", CRASH_LOOP, REVISION_FAILED)

    def describe(self, unit: Unit, env: Environment, preset: ResolvedPreset,
                 log_text: str) -> dict[str, str | list[str]]:
        """What vLLM logged about its KV cache (the log collected from the revision's creation)."""
        return kv_facts(log_text)

    # -- preflight: nothing bills ----------------------------------------------------------
    def preflight(self, env: Environment, preset: ResolvedPreset) -> GpuCell:
        if preset.gpu_memory_gb is not None and preset.gpu_memory_gb > GPU_MEMORY_GB:
            raise PreflightError(
                f"the preset needs {preset.gpu_memory_gb:g} GB of GPU memory; the azure stack serves on one "
                f"A100 {GPU_MEMORY_GB} GB (serverless profile {GPU_PROFILE_TYPE}) and no serverless profile is larger",
                file=preset.path, field="gpu_memory_gb",
                fix=f"pick a preset of at most {GPU_MEMORY_GB} GB (a smaller or more quantized model), "
                    "or serve it on a local stack with more GPU memory")
        cred = self._credential()
        try:
            cred.get_token(ARM_SCOPE)
        except (ClientAuthenticationError, CredentialUnavailableError) as exc:
            raise PreflightError(
                f"no working Azure credential (DefaultAzureCredential): {str(exc).strip().splitlines()[0]}",
                file=env.path, field="stack",
                fix="run `az login` in this shell (or export AZURE_CLIENT_ID, AZURE_TENANT_ID and "
                    "AZURE_CLIENT_SECRET for a service principal); credentials are never stored") from exc
        try:
            self._target = self._resolve(env, preset, cred)
        except ClientAuthenticationError as exc:
            raise PreflightError(
                f"Azure Resource Manager refused the credential: {describe(exc)}",
                file=env.path, field="stack",
                fix="run `az login` again (the token may be stale), and check that the account may read the "
                    "resource group") from exc
        except AzureError as exc:
            raise PreflightError(
                f"Azure Resource Manager failed during preflight: {describe(exc)}", file=env.path, field="stack",
                fix="retry in a minute; if it persists, check the Azure status page and `az account show`") from exc
        return GPU_CELL

    def _resolve(self, env: Environment, preset: ResolvedPreset, cred) -> AzureTarget:
        cfg = env.config
        try:
            sub = azure_arm.resolve_subscription(cred, cfg.get("subscription"), self.settings)
        except LookupError as exc:
            raise PreflightError(
                f"no Azure subscription: {exc}", file=env.path, field="config.subscription",
                fix='set config.subscription to a name from `az account list --query "[].name"`, '
                    "or `az account set --subscription <name>`, or export AZURE_SUBSCRIPTION_ID") from exc
        arm = self._arm(sub)
        rg = cfg.get("resource_group") or DEFAULT_RESOURCE_GROUP
        location = cfg.get("location", "swedencentral")
        if get_json(arm, f"/subscriptions/{sub}/resourcegroups/{rg}", RESOURCE_GROUPS_API) is None:
            raise PreflightError(
                f"the resource group '{rg}' does not exist in subscription {sub}",
                file=env.path, field="config.resource_group",
                fix=f"create it and the GPU environment with vllm-on-tap's /vot-config (or `az group create "
                    f"--name {rg} --location {location}`, then `az containerapp env create --name vot-env -g {rg} "
                    f"--location {location} --enable-workload-profiles --logs-destination none`)")
        envs = list(arm.managed_environments.list_by_resource_group(rg))
        if not envs:
            raise PreflightError(
                f"the resource group '{rg}' holds no Container Apps environment", file=env.path,
                field="config.resource_group",
                fix=f"run vllm-on-tap's /vot-config, or `az containerapp env create --name vot-env -g {rg} "
                    f"--location {location} --enable-workload-profiles --logs-destination none`")
        if len(envs) > 1:
            raise PreflightError(
                f"the resource group '{rg}' holds {len(envs)} Container Apps environments "
                f"({', '.join(e.name for e in envs)}); the stack needs exactly one",
                file=env.path, field="config.resource_group",
                fix="use a resource group dedicated to vllm-on-tap (one environment in it)")
        menv = envs[0]
        props = menv.get("properties") or {}
        profiles = {p.get("name"): p.get("workloadProfileType") for p in props.get("workloadProfiles") or []}
        if profiles.get(GPU_PROFILE) != GPU_PROFILE_TYPE:
            found = ", ".join(f"{n} ({t})" for n, t in profiles.items()) or "none (a Consumption-only environment)"
            raise PreflightError(
                f"the environment '{menv.name}' has no workload profile '{GPU_PROFILE}' of type {GPU_PROFILE_TYPE} "
                f"(it has: {found})", file=env.path, field="config.resource_group",
                fix=f"`az containerapp env workload-profile add --name {menv.name} -g {rg} --workload-profile-name "
                    f"{GPU_PROFILE} --workload-profile-type {GPU_PROFILE_TYPE}` (or /vot-config); if refused for "
                    f"quota, request '{QUOTA_NAME}' on the environment's Quota page")
        region = (menv.location or location).lower().replace(" ", "")  # the environment's region wins
        offered = {p.name for p in arm.available_workload_profiles.get(region)}
        if GPU_PROFILE_TYPE not in offered:
            raise PreflightError(
                f"the region '{region}' does not offer {GPU_PROFILE_TYPE} (serverless A100)",
                file=env.path, field="config.location",
                fix="use a region with serverless A100 (australiaeast, brazilsouth, canadacentral, eastus, "
                    "italynorth, swedencentral, westus, westus3) with its own resource group and environment")
        internal = bool((props.get("vnetConfiguration") or {}).get("internal"))
        storages = arm.managed_environments_storages.list(rg, menv.name).get("value") or []
        cache = any(s.get("name") == CACHE_STORAGE for s in storages)
        collector = self._collector_fqdn(arm, env, rg) if cfg.get("telemetry_enabled") else None
        name = unit_name(preset.name)
        try:
            arm.container_apps.get(rg, name)
        except ResourceNotFoundError:
            pass
        else:
            raise PreflightError(
                f"{name} already exists in '{rg}' (served, and billing); never a second unit",
                file=env.path, field="stack",
                fix=f"destroy it first: `llms-benchmark destroy {env.name} {preset.name}` if llms-benchmark served "
                    f"it, else `az containerapp delete --name {name} -g {rg} --yes` (or vllm-on-tap's /vot-destroy)")
        return AzureTarget(
            subscription_id=sub, resource_group=rg, environment_name=menv.name, environment_id=menv.id,
            location=region, default_domain=props.get("defaultDomain") or "", internal=internal,
            caller_ip=None if internal else self._caller_ip(env), cache=cache, collector_fqdn=collector,
            image=cfg.get("image") or DEFAULT_IMAGE,
        )

    def _collector_fqdn(self, arm, env: Environment, rg: str) -> str:
        try:
            app = arm.container_apps.get(rg, COLLECTOR_APP)
            fqdn = ((app.get("properties") or {}).get("configuration") or {}).get("ingress", {}).get("fqdn")
        except ResourceNotFoundError:
            fqdn = None
        if not fqdn:
            raise PreflightError(
                f"telemetry is enabled but the collector app '{COLLECTOR_APP}' in '{rg}' has no ingress FQDN",
                file=env.path, field="config.telemetry_enabled",
                fix="rerun vllm-on-tap's /vot-config with telemetry on, or set telemetry_enabled: false")
        return fqdn

    def _caller_ip(self, env: Environment) -> str:
        """This machine's public IP: the only address the app's ingress lets in."""
        retrier = Retrier(Steady(attempts=3, wait_s=1.0), time.sleep,
                          transient=lambda exc: "error" if isinstance(exc, (httpx.HTTPError, ValueError)) else None)
        try:
            for attempt in retrier:
                with attempt:
                    resp = busy(httpx.get(self.settings.public_ip_url, timeout=10, verify=tls()), NOT_OK)
                    ip = resp.text.strip()
                    ipaddress.ip_address(ip)
            return ip
        except (Busy, httpx.HTTPError, ValueError) as exc:
            problem = str(exc) or type(exc).__name__
        raise PreflightError(
            f"could not learn this machine's public IP from {self.settings.public_ip_url} ({problem}); the app's "
            "ingress is restricted to it", file=env.path, field="stack",
            fix="check the network (the IP service must answer), then retry")

    # -- serve ----------------------------------------------------------------------------
    def plan(self, env: Environment, preset: ResolvedPreset) -> Unit:
        t = self._target
        if t is None:
            raise StackError("the azure stack plans a unit only after its preflight")
        name = unit_name(preset.name)
        return Unit(
            name=name, stack=self.name, environment=env.name, preset=preset.name,
            base_url=f"{self.settings.ingress_scheme}://{name}.{t.default_domain}",
            served_name=preset.served_name, max_model_len=preset.max_model_len,
            api_key_env=None, log_path=str(self.run_dir / f"{name}.log"),
            extra={"subscription_id": t.subscription_id, "resource_group": t.resource_group, "app": name,
                   "location": t.location, "environment_id": t.environment_id, "image": t.image,
                   "key_source": f"app secret {KEY_SECRET} (read when needed, never stored)"},
        )

    def serve(self, unit: Unit, env: Environment, preset: ResolvedPreset) -> Unit:
        t = self._target
        if t is None:
            raise StackError("the azure stack serves a unit only after its preflight")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        Path(unit.log_path).write_text("")
        arm = self._arm(t.subscription_id)
        deadline = time.monotonic() + self.settings.ready_timeout_s
        retries = getattr(arm, "llms_retries", None)
        before = len(retries.retried) if retries is not None else 0
        unit.extra["create_retries"] = []
        try:
            # The key lives in this body only until the request is sent, then only in Azure.
            poller = arm.container_apps.begin_create_or_update(
                t.resource_group, unit.name, app_body(t, preset, secrets.token_hex(32)),
                polling_interval=self.settings.poll_s)
        except AzureError as exc:
            raise StackError(f"Azure refused to create {unit.name}: {describe(exc)}") from exc
        finally:
            if retries is not None:  # what the SDK retried of the create, whatever came of it
                unit.extra["create_retries"] = retries.retried[before:]
        unit.extra["created_at"] = utcnow().isoformat()
        follower = LogFollower(azure_arm.client(self._credential(), t.subscription_id, self.settings),
                               t.resource_group, unit.name, t.subscription_id, Path(unit.log_path),
                               self.settings.poll_s)
        self._followers[unit.name] = follower
        follower.start()
        try:
            app = _finish(poller, deadline, f"creating {unit.name}")
        except AzureError as exc:
            raise StackError(f"creating {unit.name} failed: {describe(exc)}") from exc
        fqdn = (app.get("properties") or {}).get("configuration", {}).get("ingress", {}).get("fqdn")
        if not fqdn:
            raise StackError(f"{unit.name} was created without an ingress FQDN")
        unit.base_url = f"{self.settings.ingress_scheme}://{fqdn}"
        return unit

    def api_key(self, unit: Unit) -> str:
        """The app's key, read from its secret at the moment a client needs it."""
        arm = self._arm(unit.extra["subscription_id"])
        try:
            listed = arm.container_apps.list_secrets(unit.extra["resource_group"], unit.extra["app"])
        except AzureError as exc:
            raise StackError(f"could not read the API key of {unit.name} (listSecrets): {describe(exc)}") from exc
        for secret in listed.get("value") or []:
            if secret.get("name") == KEY_SECRET and secret.get("value"):
                return secret["value"]
        raise StackError(f"{unit.name} has no secret '{KEY_SECRET}'")

    # -- watching --------------------------------------------------------------------------
    def logs(self, unit: Unit, offset: int) -> tuple[str, int]:
        return file_logs(unit, offset)  # the log follower writes the app's console log there

    def alive(self, unit: Unit) -> bool:
        follower = self._followers.get(unit.name)
        return not (follower is not None and follower.gone)

    # -- destroy ---------------------------------------------------------------------------
    def destroy(self, unit: Unit) -> bool:
        sub, rg, app = unit.extra["subscription_id"], unit.extra["resource_group"], unit.extra["app"]
        follower = self._followers.pop(unit.name, None)
        arm = self._arm(sub)
        poll_s, deadline = self.settings.poll_s, time.monotonic() + DESTROY_TIMEOUT_S
        try:
            try:
                found = arm.container_apps.get(rg, app)
            except ResourceNotFoundError:
                unit.extra["cloud_absent"] = True  # no app in the cloud: a create that made nothing bills nothing
                return False
            except AzureError as exc:
                raise StackError(f"could not look up {app} to delete it: {describe(exc)}") from exc
            # When the app began to bill, as Azure reports it: a leftover's record is closed with it.
            created = getattr(getattr(found, "system_data", None), "created_at", None)
            if created is not None:
                unit.extra["created_at"] = created.isoformat()
                # The cloud's own clock: what the app bills from (issue 61), never our request's time.
                unit.extra["cloud_created_at"] = created.isoformat()
            for _ in range(int(DESTROY_TIMEOUT_S / max(poll_s, 0.05)) + 1):
                try:
                    _finish(arm.container_apps.begin_delete(rg, app, polling_interval=poll_s), deadline,
                            f"deleting {app}")
                    break
                except ResourceNotFoundError:
                    break
                except ResourceExistsError:  # 409: another operation (the create) is still running
                    if time.monotonic() > deadline:
                        raise StackError(f"{app} could not be deleted: an operation on it never finished") from None
                    time.sleep(poll_s)
                except AzureError as exc:
                    raise StackError(f"deleting {app} failed: {describe(exc)}") from exc
            while True:  # confirm: GET must answer 404
                try:
                    arm.container_apps.get(rg, app)
                except ResourceNotFoundError:
                    return True
                except AzureError as exc:
                    raise StackError(f"could not confirm that {app} is gone: {describe(exc)}") from exc
                if time.monotonic() > deadline:
                    raise StackError(f"{app} still exists after its delete finished")
                time.sleep(poll_s)
        finally:
            if follower is not None:
                follower.stop()


def _finish(poller, deadline: float, what: str):
    """The LRO's result, waiting at most until `deadline` (monotonic)."""
    while not poller.done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise StackError(f"{what} did not finish in time (Azure still reports it in progress)")
        poller.wait(timeout=min(left, 1.0))
    return poller.result()
