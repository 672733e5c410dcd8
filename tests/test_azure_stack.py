"""The azure stack with the real Azure SDK (azure-mgmt-appcontainers, azure-identity)
against a loopback ARM over TLS (tests/fakes/arm_server.py) and a stand-in `az` on PATH
(DefaultAzureCredential's Azure CLI link, selected by AZURE_TOKEN_CREDENTIALS).

The CLI tests run the real console script: `serve` then `destroy`, refusals before
anything bills, faults during serve (a failed create, a unit that never becomes ready,
a crash loop, a fatal start, a 429 storm, SIGINT), each ending with the app deleted in
the fake ARM and the ledger empty; and (slow) a whole `launch` whose opencode reaches
the app with the key read from the app's secret. The API key is looked for everywhere
it must not be: files, outputs, argv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from conftest import REPO, Project, stop
from fakes.arm_server import (
    CALLER_IP,
    SUBSCRIPTION,
    SUBSCRIPTION_NAME,
    Behaviour,
    FakeArm,
    Throttle,
    gpu_environment,
)
from harness.errors import PreflightError
from harness.stacks.azure_logs import Deduper
from harness.vot import render

ENV = "azure-sweden"
PRESET = "odd-qwen3-6-35b-a3b"
APP = f"vot-{PRESET}"
# Variables that would make DefaultAzureCredential look beyond the stand-in `az`.
AZURE_VARS = ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
              "AZURE_SUBSCRIPTION_ID", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_USERNAME", "IDENTITY_ENDPOINT",
              "MSI_ENDPOINT", "AZURE_AUTHORITY_HOST")


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def arm(project: Project, tmp_path: Path):
    """The fake ARM, and the project set up to reach it as Azure (azure-sweden + the preset)."""
    project.add_environment(ENV)
    shutil.copy2(REPO / ".vot" / "presets" / f"{PRESET}.yaml", project.root / ".vot" / "presets")
    with FakeArm(tmp_path, Behaviour()) as fake:
        for var in AZURE_VARS:
            project.env.pop(var, None)
        project.env.update(fake.cli_env(tmp_path / "bin"))
        project.env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{project.env['PATH']}"
        project.env["LLMS_BENCHMARK_AZURE_READY_TIMEOUT_S"] = "60"
        yield fake


@pytest.fixture
def in_process(arm: FakeArm, project: Project, monkeypatch):
    """This process's environment pointed at the fake ARM, for stack calls without the CLI."""
    for var in AZURE_VARS:
        monkeypatch.delenv(var, raising=False)
    for key, value in project.env.items():
        if key.startswith(("LLMS_BENCHMARK_", "AZURE_")) or key in ("PATH", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
            monkeypatch.setenv(key, value)
    return arm


def stack_and_inputs(project: Project, preset: str = PRESET, env: str = ENV):
    from harness.stacks.azure import AzureStack
    from harness.vot.environment import load_environment
    from harness.vot.preset import load_preset

    return (AzureStack(project.root), load_environment(project.root, env),
            load_preset(project.root, preset).resolve("azure"))


def dump(out: str, err: str) -> str:
    return f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"


def assert_cleaned_up(project: Project, arm: FakeArm, *, created: bool = True) -> None:
    """The app is gone from the fake ARM (deleted, if it was ever created) and the ledger is empty."""
    assert arm.app(APP) is None, f"{APP} still exists in the fake ARM"
    if created:
        assert APP in arm.deleted, f"{APP} was never deleted (created: {arm.created}, deleted: {arm.deleted})"
    assert project.ledger() == {}, f"the ledger still holds {project.ledger()}"


def assert_key_nowhere(project: Project, arm: FakeArm, *texts: str) -> None:
    """No key the fake ARM received appears in any file of the project or the test's folder,
    nor in what the CLI printed."""
    assert arm.issued_keys, "no key was ever sent to the fake ARM"
    for key in arm.issued_keys:
        assert re.fullmatch(r"[0-9a-f]{64}", key), "the key is not 32 random bytes in hex"
        for text in texts:
            assert key not in text, "the API key was printed"
        for path in project.root.parent.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert key.encode() not in path.read_bytes(), f"the API key was written to {path}"


# -- the Deduper (pure) ------------------------------------------------------------------------
def feed(d: Deduper, lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        out += d.feed(line)
    return out + d.end()


def test_deduper_drops_what_a_reconnect_repeats():
    d = Deduper()
    assert feed(d, ["a", "b", "c"]) == ["a", "b", "c"]
    d.reconnect()
    assert feed(d, ["a", "b", "c", "d", "e"]) == ["d", "e"]  # the tail repeats a..c
    d.reconnect()
    assert feed(d, ["c", "d", "e"]) == []  # nothing new
    d.reconnect()
    assert feed(d, ["e", "f"]) == ["f"]
    d.reconnect()
    assert feed(d, ["x", "y"]) == ["x", "y"]  # a restarted container: all new


def test_deduper_takes_the_longest_overlap_of_repeating_lines():
    d = Deduper()
    feed(d, ["tick", "tock", "tick", "tock"])
    d.reconnect()
    assert feed(d, ["tick", "tock", "tick", "tock", "boom"]) == ["boom"]
    d.reconnect()
    assert feed(d, ["tock", "boom", "tick"]) == ["tick"]


def test_deduper_drops_a_tail_cut_short_by_the_end_of_a_connection():
    """The race behind a line written twice: a connection ends (poll_s passed, or a quiet
    read) while its tail is still replaying old lines; those lines are repeats, not new."""
    d = Deduper()
    assert feed(d, ["a", "b", "c", "d"]) == ["a", "b", "c", "d"]
    d.reconnect()
    assert feed(d, ["a", "b"]) == []  # cut short mid-tail
    d.reconnect()
    assert feed(d, ["b", "c", "d", "e"]) == ["e"]  # the next tail: only the new line
    d.reconnect()
    assert feed(d, ["c", "x"]) == ["c", "x"]  # a run that breaks off is new from where it began


# -- serve and destroy through the CLI ----------------------------------------------------------
@pytest.mark.timeout(180)
def test_serve_then_destroy(project: Project, arm: FakeArm):
    code, out, err = project.run_cli(["serve", ENV, PRESET, "--json"], timeout=120)
    assert code == 0, dump(out, err)
    shown = json.loads(out)
    app = arm.app(APP)
    assert app is not None and app.state == "Succeeded"
    assert shown["base_url"] == f"https://127.0.0.1:{app.port}" and shown["served_name"] == "qwen3.6-35b-a3b"

    # The app is vllm-on-tap's, field for field.
    preset = yaml.safe_load((project.root / ".vot" / "presets" / f"{PRESET}.yaml").read_text())
    body = app.body
    props = body["properties"]
    assert body["location"] == "swedencentral"  # the environment's "Sweden Central", normalised
    assert props["workloadProfileName"] == "gpu-a100"
    assert props["environmentId"].endswith("/managedEnvironments/vot-env")
    container = props["template"]["containers"][0]
    assert container["image"] == "vllm/vllm-openai:v0.30.0" and "command" not in container
    assert container["args"] == [preset["model"], "--served-model-name", "qwen3.6-35b-a3b", "--port", "8000",
                                 *render.argv(preset["vllm_args"])]
    assert container["args"][container["args"].index("--speculative-config") + 1] == \
        '{"method": "mtp", "num_speculative_tokens": 3}'
    assert container["env"] == [{"name": "VLLM_API_KEY", "secretRef": "vllm-api-key"}]
    assert container["resources"] == {"cpu": 24, "memory": "220Gi"}
    assert props["template"]["scale"] == {"minReplicas": 1, "maxReplicas": 1}
    conf = props["configuration"]
    assert conf["activeRevisionsMode"] == "Single"
    assert conf["secrets"] == [{"name": "vllm-api-key"}] and list(app.secrets) == ["vllm-api-key"]
    assert conf["ingress"] == {"external": True, "targetPort": 8000, "transport": "auto", "allowInsecure": False,
                               "ipSecurityRestrictions": [{"name": "caller", "ipAddressRange": f"{CALLER_IP}/32",
                                                           "action": "Allow"}]}

    # The ledger has what destroy needs, and no key.
    (entry,) = project.ledger().values()
    assert entry["stack"] == "azure" and entry["api_key_env"] is None
    assert entry["extra"]["subscription_id"] == SUBSCRIPTION and entry["extra"]["resource_group"] == "rg-vot"
    # The console log was followed from creation.
    log = (project.root / ".vot" / "run" / f"{APP}.log").read_text()
    assert "Application startup complete." in log
    assert log.count("INFO vLLM API server version") == 1, "a reconnect repeated lines"
    # The readiness poll carried the key (the fake vLLM refuses /v1 without it).
    assert_key_nowhere(project, arm, out, err)

    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=120)
    assert code == 0, dump(out, err)
    assert f"destroyed {APP} on {ENV}" in out and "already" not in out
    assert_cleaned_up(project, arm)
    deletes, gets = arm.calls("DELETE", APP), arm.calls("GET", f"containerApps/{APP}")
    assert [d["status"] for d in deletes] == [202]
    assert gets[-1]["status"] == 404 and gets[-1]["t"] > deletes[-1]["t"], "destroy did not confirm the app gone"

    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=60)
    assert code == 0 and "does not exist" in out, dump(out, err)


@pytest.mark.timeout(120)
def test_destroy_reports_an_app_already_gone(project: Project, arm: FakeArm):
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 0, dump(out, err)
    arm.vanish(APP)  # deleted behind our back
    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=60)
    assert code == 0, dump(out, err)
    assert "already" in out and project.ledger() == {}
    assert not arm.calls("DELETE", APP)


# -- preflight: refusals before anything bills --------------------------------------------------
def _refusal_case(case: str, arm: FakeArm, project: Project) -> tuple[str, str, str]:
    """Set the case up; returns (preset, field, phrase)."""
    if case == "logged-out":
        arm.set_az(logged_in=False)
        return PRESET, "stack", "no working Azure credential"
    if case == "stale-token":
        arm.set_az(token="a-token-arm-never-issued")
        return PRESET, "stack", "refused the credential"
    if case == "no-resource-group":
        arm.behaviour.resource_groups = ()
        return PRESET, "config.resource_group", "'rg-vot' does not exist"
    if case == "no-environment":
        arm.behaviour.environments = []
        return PRESET, "config.resource_group", "holds no Container Apps environment"
    if case == "two-environments":
        arm.behaviour.environments = [gpu_environment("vot-env"), gpu_environment("other-env")]
        return PRESET, "config.resource_group", "holds 2 Container Apps environments"
    if case == "no-gpu-profile":
        arm.behaviour.environments = [gpu_environment(profiles=[
            {"name": "Consumption", "workloadProfileType": "Consumption"}])]
        return PRESET, "config.resource_group", "no workload profile 'gpu-a100'"
    if case == "region-without-a100":
        arm.behaviour.offered_types = ("Consumption", "Consumption-GPU-NC8as-T4")
        return PRESET, "config.location", "does not offer Consumption-GPU-NC24-A100"
    if case == "too-big":
        data = yaml.safe_load((project.root / ".vot" / "presets" / f"{PRESET}.yaml").read_text())
        data.update(name="too-big", gpu_memory_gb=96)
        project.add_preset("too-big", yaml.safe_dump(data, sort_keys=False))
        return "too-big", "gpu_memory_gb", "96 GB of GPU memory"
    if case == "already-served":
        arm.add_app(APP)
        return PRESET, "stack", f"{APP} already exists"
    if case == "telemetry-without-collector":
        project.add_environment(ENV, f"name: {ENV}\nstack: azure\nconfig:\n  location: swedencentral\n"
                                     "  resource_group: rg-vot\n  telemetry_enabled: true\n")
        return PRESET, "config.telemetry_enabled", "collector app 'otel-collector'"
    if case == "unknown-subscription":
        project.add_environment(ENV, f"name: {ENV}\nstack: azure\nconfig:\n  subscription: nope\n"
                                     "  location: swedencentral\n  resource_group: rg-vot\n")
        return PRESET, "config.subscription", "no subscription named 'nope'"
    raise AssertionError(case)


REFUSALS = ["logged-out", "stale-token", "no-resource-group", "no-environment", "two-environments",
            "no-gpu-profile", "region-without-a100", "too-big", "already-served", "unknown-subscription",
            "telemetry-without-collector"]


@pytest.mark.parametrize("case", REFUSALS)
@pytest.mark.timeout(60)
def test_preflight_refusals_name_the_fix(project: Project, in_process: FakeArm, case: str):
    preset, field, phrase = _refusal_case(case, in_process, project)
    stack, env, resolved = stack_and_inputs(project, preset)
    with pytest.raises(PreflightError) as caught:
        stack.preflight(env, resolved)
    exc = caught.value
    assert exc.field == field and phrase in exc.message, exc.render()
    assert exc.fix and exc.file in (str(env.path), str(resolved.path))
    assert not in_process.calls("PUT", "containerApps"), "preflight created something"


@pytest.mark.timeout(60)
def test_preflight_resolves_a_subscription_by_name(project: Project, in_process: FakeArm):
    project.add_environment(ENV, f"name: {ENV}\nstack: azure\nconfig:\n  subscription: {SUBSCRIPTION_NAME}\n"
                                 "  location: swedencentral\n  resource_group: rg-vot\n")
    stack, env, resolved = stack_and_inputs(project)
    assert stack.preflight(env, resolved).label == "A100 80 GB"
    unit = stack.plan(env, resolved)
    assert unit.extra["subscription_id"] == SUBSCRIPTION
    assert in_process.calls("GET", "/subscriptions") and not in_process.calls("PUT", "containerApps")


@pytest.mark.timeout(60)
def test_preflight_discovers_the_cache_and_the_collector(project: Project, in_process: FakeArm):
    in_process.behaviour.storages = ("vot-cache",)
    collector = in_process.add_app("otel-collector")
    project.add_environment(ENV, f"name: {ENV}\nstack: azure\nconfig:\n  location: swedencentral\n"
                                 "  resource_group: rg-vot\n  telemetry_enabled: true\n  image: vllm/vllm-openai:v9\n")
    stack, env, resolved = stack_and_inputs(project)
    stack.preflight(env, resolved)
    t = stack.target
    assert t.cache and t.collector_fqdn == f"127.0.0.1:{collector.port}" and t.image == "vllm/vllm-openai:v9"
    assert t.caller_ip == CALLER_IP and t.location == "swedencentral" and not t.internal


def test_app_body_with_cache_telemetry_secrets_and_an_internal_environment(tmp_path, monkeypatch):
    from harness.stacks.azure import AzureTarget, app_body
    from harness.vot.preset import load_preset

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    data = yaml.safe_load((REPO / ".vot" / "presets" / f"{PRESET}.yaml").read_text())
    data["env"] = ["HF_TOKEN"]
    (tmp_path / ".vot" / "presets").mkdir(parents=True)
    (tmp_path / ".vot" / "presets" / f"{PRESET}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    preset = load_preset(tmp_path, PRESET).resolve("azure")
    target = AzureTarget(subscription_id=SUBSCRIPTION, resource_group="rg-vot", environment_name="vot-env",
                         environment_id="/subscriptions/x/envs/vot-env", location="swedencentral",
                         default_domain="d.example", internal=True, caller_ip=None, cache=True,
                         collector_fqdn="otel-collector.internal.d.example", image="img:1")
    body = app_body(target, preset, "k" * 64)
    props = body["properties"]
    container = props["template"]["containers"][0]
    assert props["configuration"]["secrets"] == [{"name": "vllm-api-key", "value": "k" * 64},
                                                 {"name": "hf-token", "value": "hf_not_a_real_token"}]
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_API_KEY"] == {"name": "VLLM_API_KEY", "secretRef": "vllm-api-key"}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "secretRef": "hf-token"}
    assert env["HF_HOME"]["value"] == "/vot-cache/huggingface" and env["VLLM_CACHE_ROOT"]["value"] == "/vot-cache/vllm"
    assert env["OTEL_SERVICE_NAME"]["value"] == APP
    args = container["args"]
    assert args[:5] == [preset.model, "--served-model-name", preset.served_name, "--port", "8000"]
    assert args[-4:] == ["--safetensors-load-strategy", "prefetch", "--otlp-traces-endpoint",
                         "http://otel-collector.internal.d.example/v1/traces"]
    assert container["volumeMounts"] == [{"volumeName": "vot-cache", "mountPath": "/vot-cache"}]
    assert props["template"]["volumes"][0]["storageName"] == "vot-cache"
    assert "ipSecurityRestrictions" not in props["configuration"]["ingress"]  # internal: the VNet only
    assert props["configuration"]["ingress"]["allowInsecure"] is False


@pytest.mark.timeout(90)
def test_serve_refusal_exits_2_and_creates_nothing(project: Project, arm: FakeArm):
    arm.behaviour.offered_types = ("Consumption",)
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=60)
    assert code == 2, dump(out, err)
    assert "field 'config.location'" in err and "fix:" in err and "Traceback" not in err
    assert not arm.calls("PUT", "containerApps") and not arm.created
    assert project.ledger() == {}


# -- faults during serve: each ends with the app deleted and the ledger empty --------------------
@pytest.mark.parametrize("case", ["provisioning-failed", "conflict"])
@pytest.mark.timeout(120)
def test_a_failed_create_is_cleaned_up(project: Project, arm: FakeArm, case: str):
    arm.behaviour.create = "failed" if case == "provisioning-failed" else "conflict"
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 3, dump(out, err)
    if case == "provisioning-failed":
        assert "ContainerAppProvisioningFailed" in err, dump(out, err)
        assert_cleaned_up(project, arm)  # a Failed app still exists (and may bill): deleted
    else:
        assert "409" in err and "Conflict" in err, dump(out, err)
        assert_cleaned_up(project, arm, created=False)
        assert not arm.created


@pytest.mark.timeout(120)
def test_never_ready_times_out_and_is_destroyed(project: Project, arm: FakeArm):
    arm.behaviour.boot = "never"
    project.env["LLMS_BENCHMARK_AZURE_READY_TIMEOUT_S"] = "5"
    started = time.monotonic()
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 3, dump(out, err)
    assert "did not list 'qwen3.6-35b-a3b' on /v1/models within 5s" in err, dump(out, err)
    assert "Loading safetensors checkpoint shards" in err  # the log's last lines, shown
    assert_cleaned_up(project, arm)
    assert time.monotonic() - started < 60
    lines = (project.root / ".vot" / "run" / f"{APP}.log").read_text().splitlines()
    shards = [line for line in lines if "Loading safetensors" in line]
    assert shards and len(shards) == len(set(shards)), "the follower wrote a line twice across reconnects"


@pytest.mark.parametrize("case, why", [("crashloop", "crash loop: container vllm"),
                                       ("fatal", "EngineCore failed to start")])
@pytest.mark.timeout(120)
def test_a_failed_start_is_destroyed_at_once_and_says_why(project: Project, arm: FakeArm, case: str, why: str):
    arm.behaviour.boot = case
    started = time.monotonic()
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 3, dump(out, err)
    assert why in err and "fatal" in err, dump(out, err)
    assert time.monotonic() - started < 45, "it waited for the ready timeout instead of stopping at once"
    assert_cleaned_up(project, arm)


@pytest.mark.timeout(120)
def test_a_429_storm_is_waited_out_with_retry_after(project: Project, arm: FakeArm):
    arm.behaviour.throttle = [Throttle("PUT", f"containerApps/{APP}", count=2, retry_after_s=1),
                              Throttle("POST", "listSecrets", count=1, retry_after_s=1)]
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 0, dump(out, err)
    puts = arm.calls("PUT", f"containerApps/{APP}")
    assert [p["status"] for p in puts] == [429, 429, 201]
    assert all(b["t"] - a["t"] >= 0.95 for a, b in zip(puts, puts[1:])), "Retry-After was not honoured"
    assert [p["status"] for p in arm.calls("POST", "listSecrets")][:2] == [429, 200]
    code, out, err = project.run_cli(["destroy", ENV, PRESET], timeout=60)
    assert code == 0, dump(out, err)
    assert_cleaned_up(project, arm)


@pytest.mark.timeout(120)
def test_an_endless_429_storm_gives_up_after_bounded_retries(project: Project, arm: FakeArm):
    arm.behaviour.throttle = [Throttle("PUT", f"containerApps/{APP}", count=1000, retry_after_s=1)]
    started = time.monotonic()
    code, out, err = project.run_cli(["serve", ENV, PRESET], timeout=90)
    assert code == 3, dump(out, err)
    assert "429" in err and "TooManyRequests" in err, dump(out, err)
    puts = arm.calls("PUT", f"containerApps/{APP}")
    assert len(puts) == 7, f"{len(puts)} tries: the storm is not bounded at 1 + 6 retries"
    assert all(b["t"] - a["t"] >= 0.95 for a, b in zip(puts, puts[1:]))
    assert time.monotonic() - started < 60
    assert_cleaned_up(project, arm, created=False)


@pytest.mark.timeout(120)
def test_sigint_during_serve_deletes_the_app(project: Project, arm: FakeArm):
    arm.behaviour.provision_s = 3.0  # still provisioning when the signal lands: DELETE answers 409 first
    proc = project.popen(["serve", ENV, PRESET])
    try:
        arm.wait_for(lambda: arm.calls("PUT", f"containerApps/{APP}"), timeout_s=60)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            stop(proc)
    assert proc.returncode != 0, dump(out, err)
    assert f"{APP} destroyed" in err, dump(out, err)
    statuses = [d["status"] for d in arm.calls("DELETE", APP)]
    assert statuses[0] == 409 and statuses[-1] == 202, statuses  # waited for the create, then deleted
    assert_cleaned_up(project, arm)


# -- the whole launch: opencode gets the key through its environment only ------------------------
class ArgvWatch(threading.Thread):
    """Samples every process's argv while a launch runs (bounded: stops with the test)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.seen: set[str] = set()

    def run(self) -> None:
        for _ in range(3000):  # 0.1 s apart: at most five minutes
            for proc in psutil.process_iter():
                try:
                    self.seen.add("\0".join(proc.cmdline()))
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
            if self.halt.wait(0.1):
                return


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_launch_on_azure_reads_the_key_from_the_app(project: Project, arm: FakeArm):
    arm.behaviour.trajectory = project.root / "replay" / "hello.yaml"  # quick: see conftest
    arm.behaviour.vllm_tls = False  # opencode trusts only public CAs: the app speaks plain HTTP here
    project.env["LLMS_BENCHMARK_AZURE_INGRESS_SCHEME"] = "http"
    watch = ArgvWatch()
    watch.start()
    try:
        code, out, err = project.run_cli(["launch", "local", ENV, PRESET, "--mission", "hello",
                                          "--probe-long-tokens", "2000", "--json"], timeout=300)
    finally:
        watch.halt.set()
        watch.join(timeout=10)
    assert code == 0, dump(out, err)
    run_dir, rec = project.only_run()
    assert rec["status"] == "ok" and rec["stack"] == "azure" and rec["key"]["gpu"] == "A100 80 GB", rec
    assert rec["smoke"].startswith("passed")  # opencode's requests carried the app's key (else 401)
    assert rec["gpu_hours"] and rec["gpu_hours"] > 0
    assert "Application startup complete." in (run_dir / "unit.log").read_text()
    assert_cleaned_up(project, arm)
    assert_key_nowhere(project, arm, out, err)
    for key in arm.issued_keys:
        assert not any(key in argv for argv in watch.seen), "the API key was on a command line"
    assert len(watch.seen) > 5, "the argv watch saw nothing"
