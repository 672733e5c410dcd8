"""`azure`'s declaration (see harness/stack_specs/spec.py), apart from azure.py only because
that module loads the Azure SDK: listing the stacks or checking an environment file
must not pay for it."""

from __future__ import annotations

from harness.stack_specs.spec import StackSpec, config_schema

DEFAULT_IMAGE = "vllm/vllm-openai:v0.30.0"
DEFAULT_RESOURCE_GROUP = "rg-vot"
VLLM_PORT = 8000  # vLLM's own default, also the container's target port
# Regions with serverless A100 GPUs (Container Apps' Consumption-GPU-NC24-A100 profile).
LOCATIONS = ("australiaeast", "brazilsouth", "canadacentral", "eastus", "italynorth", "swedencentral",
             "westus", "westus3")

SPEC = StackSpec(
    "azure", "harness.stacks.azure:AzureStack", default_port=VLLM_PORT, preset_override=True, aliases=("aca",),
    config=config_schema(
        subscription={"type": "string", "minLength": 1, "description": "The Azure subscription id the app bills to."},
        location={"enum": list(LOCATIONS), "description": "A region with serverless A100 GPUs."},
        resource_group={"type": "string", "minLength": 1,
                        "description": f"Default {DEFAULT_RESOURCE_GROUP}; dedicated to vllm-on-tap."},
        image={"type": "string", "minLength": 1, "description": "The vLLM image the app runs (default: vllm-on-tap's)."},
        telemetry_enabled={"type": "boolean", "description": "vllm-on-tap's OpenTelemetry collector app is deployed "
                                                             "beside the model (read from its /vot-config)."},
        environment={"description": "Historic (before 0.2.1): ignored, the Container Apps environment is discovered."},
        storage={"description": "Historic (before 0.2.1): ignored, the cache storage is discovered."},
        api_key_env={"description": "Historic (0.1): ignored."},
    ),
    # vllm-on-tap < 0.2.1 named the Container Apps environment and the cache storage; both
    # are discovered in the resource group now (and 0.1's api_key_env is gone).
    dropped_config_keys=("environment", "storage", "api_key_env"),
)
