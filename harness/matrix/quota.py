"""What the engine allows at once: the GPU quota Azure reports for Container Apps.

The usage named "Managed Environment Consumption NCA100 GPUs" (ARM's Container Apps usages,
of the environment and of the region) gives a limit and what is in use; the free GPUs cap how
many cells serve at once (one A100 each). Read once at the matrix's preflight, through the
same SDK pipeline as the stack (credential, retries honouring Retry-After).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import PreflightError

QUOTA_NAME = "Managed Environment Consumption NCA100 GPUs"


def _norm(text: str | None) -> str:
    return "".join((text or "").split()).casefold()


@dataclass(frozen=True)
class GpuQuota:
    limit: int
    used: int
    where: str  # "environment vot-env" / "region swedencentral"

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)

    def describe(self) -> str:
        return f"{self.free} of {self.limit} A100 GPUs free ({QUOTA_NAME}, {self.where})"


def _match(usages) -> tuple[int, int] | None:
    for usage in usages:
        name = usage.get("name") or {}
        if _norm(QUOTA_NAME) in (_norm(name.get("localizedValue")), _norm(name.get("value"))):
            return int(usage.get("limit") or 0), int(usage.get("currentValue") or 0)
    return None


def read_gpu_quota(env) -> GpuQuota | None:
    """The tightest of the environment's and the region's NCA100 GPU usage; None when Azure
    reports neither (the cap is then `--parallel` alone, and a refusal still queues the cell)."""
    from azure.core.exceptions import AzureError

    from harness.stacks import azure_arm
    from harness.stacks.azure_arm import AzureSettings, describe
    from harness.stack_specs.azure import DEFAULT_RESOURCE_GROUP

    settings = AzureSettings.from_env()
    cfg = env.config
    try:
        cred = azure_arm.credential()
        sub = azure_arm.resolve_subscription(cred, cfg.get("subscription"), settings)
        rg = cfg.get("resource_group") or DEFAULT_RESOURCE_GROUP
        location = cfg.get("location", "swedencentral")
        with azure_arm.client(cred, sub, settings) as arm:
            found: list[GpuQuota] = []
            envs = list(arm.managed_environments.list_by_resource_group(rg))
            for menv in envs[:1]:
                location = (menv.location or location).lower().replace(" ", "")
                hit = _match(arm.managed_environment_usages.list(rg, menv.name))
                if hit:
                    found.append(GpuQuota(*hit, where=f"environment {menv.name}"))
            hit = _match(arm.usages.list(location))
            if hit:
                found.append(GpuQuota(*hit, where=f"region {location}"))
    except LookupError as exc:
        raise PreflightError(f"no Azure subscription: {exc}", file=env.path, field="config.subscription",
                             fix="set config.subscription, or `az account set --subscription <name>`") from exc
    except AzureError as exc:
        raise PreflightError(f"could not read the GPU quota ({QUOTA_NAME}): {describe(exc)}", file=env.path,
                             field="stack", fix="run `az login` (the token may be stale) and retry; "
                                                "`az containerapp env list-usages` shows the same figures") from exc
    except Exception as exc:  # noqa: BLE001 - a credential that cannot start (no az, no variables)
        raise PreflightError(f"could not read the GPU quota: {type(exc).__name__}: {str(exc).strip()[:200]}",
                             file=env.path, field="stack", fix="run `az login` in this shell") from exc
    return min(found, key=lambda q: q.free) if found else None
