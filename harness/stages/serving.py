"""The stages up to a measured unit: preflight, serve, wait-ready, probe."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import httpx

from harness.errors import StackError, UserError
from harness.run.preflight import run_preflight
from harness.probe import LONG_TARGET, run_probe
from harness.records.record import RunRecord, SandboxFigures, utcnow
from harness.sandbox import agentfs
from harness.sandbox.confine import agent_view
from harness.sandbox.identity import hand_over
from harness.serving import pace
from harness.serving.engine import identify
from harness.serving.preflight_fit import estimate_against_log
from harness.sandbox.proof import must_stay_hidden, prove_unprivileged, prove_view
from harness.stages.context import LaunchContext
from harness.run.units import claim


def preflight(rec: RunRecord, ctx: LaunchContext) -> None:
    opts = ctx.opts
    pf = ctx.pf = run_preflight(ctx.root, opts.environment, opts.preset, opts.mission, no_sandbox=not opts.sandbox)
    ctx.sandbox = pf.sandbox
    rec.sandbox = SandboxFigures(kind=pf.sandbox.kind)
    ctx.secret_names = list(pf.preset.env)
    ctx.secret_values = [os.environ.get(name) for name in pf.preset.env]  # the user's values, before a mint
    rec.stack, rec.key.gpu, rec.gpus = pf.env.stack, pf.gpu.label, pf.gpu.gpus
    rec.model, rec.served_name, rec.max_model_len = pf.preset.model, pf.preset.served_name, pf.preset.max_model_len
    rec.preset_sha256, rec.mission_sha256 = pf.preset.sha256, pf.mission.sha256
    rec.versions["opencode"] = pf.opencode_version or ""
    ctx.say(f"preflight ok: {pf.env.stack} on {pf.gpu.label}; preset {pf.preset.name} serves "
            f"{pf.preset.model} as {pf.preset.served_name}")
    for line in pf.kv_fit or []:
        ctx.say(f"kv fit: {line}")
    claim(ctx.root, pf)
    # Looked at from outside before anything bills: the key, the checkout, other runs and
    # the real HOME are invisible from inside, wherever the checkout lies.
    prove_view(ctx.sandbox, agent_view([ctx.paths.dir], pf.opencode, []),
               must_stay_hidden(ctx.root, ctx.paths.dir, Path.home()))
    # And that nothing privileged works in there: no capability, no remount, no file handle,
    # no device node, whoever launched us.
    if ctx.sandbox.kind == "bwrap":
        probe_dir = ctx.paths.dir / "preflight-probe"
        probe_dir.mkdir(parents=True, exist_ok=True)
        view = agent_view([probe_dir], pf.opencode, [])
        hand_over([probe_dir], view.who)
        try:
            rec.sandbox.privilege = prove_unprivileged(ctx.sandbox, view, probe_dir)
        finally:
            agentfs.remove(probe_dir)  # written as the agent's user: removed by descriptor, no link followed
        rec.sandbox.agent_user = view.who.describe


MINTED_VAR = "VLLM_API_KEY"  # the key a local server checks (vLLM's convention; llama.cpp's key file)


def mint_key(rec: RunRecord, ctx: LaunchContext) -> None:
    """The key the agent's side will see, made for this launch: a local stack is started with a
    fresh random key in place of the preset's (whose value stays out of every process the launch
    starts), so a key the agent leaks opens nothing once the unit is destroyed. Azure's stack
    mints its own per Container App. Only its fingerprint is recorded."""
    pf = ctx.pf
    stack_mints = getattr(pf.stack, "api_key", None) is not None
    if MINTED_VAR in pf.preset.env and not stack_mints:
        ctx.restore_env[MINTED_VAR] = os.environ.get(MINTED_VAR)
        os.environ[MINTED_VAR] = minted = secrets.token_hex(32)
        rec.api_key = (f"minted for this launch (sha256 {hashlib.sha256(minted.encode()).hexdigest()[:16]}); "
                       "revoked with the unit")
    elif stack_mints:
        rec.api_key = "minted by the stack for this unit; revoked with the unit"
    else:
        rec.api_key = "none: the unit checks no key"


def serve(rec: RunRecord, ctx: LaunchContext) -> None:
    rec.times.serve_start = utcnow()
    # On disk before the create is asked for (issue 61): a matrix reads a serve's running cost from
    # this record, and a create that takes minutes bills from its request, so no slow create can
    # pass the budget unseen.
    rec.save(ctx.paths.dir)
    mint_key(rec, ctx)
    unit = ctx.life.serve(ctx.pf)
    rec.unit, rec.scripted = unit.name, unit.scripted
    rec.artifacts.unit_log = str(ctx.paths.unit_log)
    ctx.say(f"serving {unit.name} at {unit.base_url} (billing until destroyed); waiting until it answers")


def wait_ready(rec: RunRecord, ctx: LaunchContext) -> None:
    ctx.life.wait_ready()
    rec.times.ready = utcnow()
    ctx.say(f"ready after {(rec.times.ready - rec.times.serve_start).total_seconds():.0f}s")
    unit = ctx.unit
    rec.engine = identify(unit.base_url, ctx.api_key, image=unit.extra.get("image"),
                          image_digest=unit.extra.get("image_digest"))
    ctx.say(f"served by {rec.engine.describe()}")
    _describe_serving(rec, ctx)


def _describe_serving(rec: RunRecord, ctx: LaunchContext) -> None:
    """Optional stack member `describe`: how the unit serves (flags, chat template, build,
    what the server said at start), on the record next to the speeds it explains."""
    pf = ctx.pf
    describe = getattr(pf.stack, "describe", None)
    if describe is None:
        return
    ctx.collector.drain()
    log = ctx.paths.unit_log
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    rec.serving_config = describe(ctx.unit, pf.env, pf.preset, text)
    rec.serving_config.update(estimate_against_log(pf.env, pf.preset, rec.serving_config))
    if "kv_cache_tokens_estimate" in rec.serving_config:
        c = rec.serving_config
        ctx.say(f"kv cache: vLLM holds {int(c['kv_cache_tokens']):,} tokens in {c['kv_cache_gib']} GiB; the fit "
                f"check's formula gives {int(c['kv_cache_tokens_estimate']):,} ({c['kv_estimate_off_pct']} %)")
    if threads := rec.serving_config.get("threads"):
        ctx.say(f"server: threads {threads}")
    if backend := rec.serving_config.get("cpu_backend"):
        ctx.say(f"server: CPU backend {backend} (the variant llama.cpp chose for this CPU)")
    if info := rec.serving_config.get("system_info"):
        ctx.say(f"server: {info}")


def probe(rec: RunRecord, ctx: LaunchContext) -> None:
    pf, unit, opts = ctx.pf, ctx.unit, ctx.opts
    cap = getattr(pf.stack, "probe_long_cap", None)
    long_target = opts.probe_long_tokens or cap or LONG_TARGET
    try:
        rec.probe = run_probe(unit.base_url, unit.served_name, max_model_len=unit.max_model_len,
                              api_key=ctx.api_key, long_target=long_target)
    except httpx.HTTPError as exc:
        raise StackError(f"{unit.name} failed the speed probe: {exc}") from exc
    if long_target < LONG_TARGET:
        why = "--probe-long-tokens" if opts.probe_long_tokens else f"the {pf.stack.name} stack's cap"
        rec.probe.notes.append(f"long-context target {long_target} tokens ({why})")
    ctx.collector.raise_if_problem()
    p = rec.probe
    ctx.say(f"probe: decode {p.decode_short_tps} tok/s short, {p.decode_long_tps} tok/s at "
            f"{p.long_context_tokens} tokens; prefill {p.prefill_tps} tok/s")
    _retune_after_probe(rec, ctx, long_target)
    rec.times.probed = utcnow()
    ctx.pace_reference = pace.remember(f"{pf.preset.sha256[:16]} {rec.key.gpu}", rec.probe)
    fits_smoke(rec, ctx)


def _retune_after_probe(rec: RunRecord, ctx: LaunchContext, long_target: int) -> None:
    """A CPU server whose box changed since it was served (another process started, or ended)
    is served again with the threads the free cores call for, and probed again."""
    pf, unit = ctx.pf, ctx.unit
    retune = getattr(pf.stack, "retune", None)
    if retune is None:
        return
    before = pf.stack.threads_now
    new = retune(unit, pf.env, pf.preset)
    if new is None:
        return
    ctx.say(f"probe: the box changed since the serve: threads {before.threads} -> {new.threads} ({new.why}); "
            "probing again")
    first = rec.probe
    try:
        rec.probe = run_probe(unit.base_url, unit.served_name, max_model_len=unit.max_model_len,
                              api_key=ctx.api_key, long_target=long_target)
    except httpx.HTTPError as exc:
        raise StackError(f"{unit.name} failed the speed probe after serving again: {exc}") from exc
    rec.probe.notes = [*first.notes, f"probed again after threads {before.threads} -> {new.threads} "
                                     f"(first probe: decode {first.decode_short_tps} tok/s short, "
                                     f"prefill {first.prefill_tps} tok/s)"]
    rec.serving_config["threads"] = f"{new.threads}: {new.why}"
    p = rec.probe
    ctx.say(f"probe: decode {p.decode_short_tps} tok/s short, {p.decode_long_tps} tok/s at "
            f"{p.long_context_tokens} tokens; prefill {p.prefill_tps} tok/s")


# opencode's first request: its system prompt and tool list (~5k tokens for hello, which turns
# three tools off; ~7k with them) and its first answer, a tool call.
FIRST_PROMPT_TOKENS = 6000
FIRST_ANSWER_TOKENS = 128
STALL_MARGIN = 1.5


class TooSlowForMission(UserError):
    pass


def first_turn_s(probe) -> float | None:
    """Seconds opencode's first turn takes at the probed pace (None: the probe lacks a figure)."""
    if not probe.prefill_tps or not probe.decode_short_tps:
        return None
    return FIRST_PROMPT_TOKENS / probe.prefill_tps + FIRST_ANSWER_TOKENS / probe.decode_short_tps


def fits_smoke(rec: RunRecord, ctx: LaunchContext) -> None:
    """Caps follow the probed pace: the smoke's and the mission's stall limits become at least
    1.5x opencode's first turn at that pace; and the launch refuses before the smoke, nothing
    billed past the probe, when that turn alone would take half the mission's time cap."""
    need = first_turn_s(rec.probe)
    if need is None:
        return
    ctx.stall_floor_s = STALL_MARGIN * need
    cap = ctx.pf.mission.manifest.time_cap_minutes * 60
    if need <= cap / 2:
        return
    p = rec.probe
    threads = rec.serving_config.get("threads")
    raise TooSlowForMission(
        f"at the probed pace (prefill {p.prefill_tps} tok/s, decode {p.decode_short_tps} tok/s) opencode's first "
        f"turn (~{FIRST_PROMPT_TOKENS:,} prompt tokens) takes ~{need:.0f} s, half the mission's {cap:.0f} s cap or "
        f"more: the machine is too busy or too slow for this preset" + (f" (threads {threads})" if threads else ""),
        fix="free the machine (stop other CPU-bound processes) or serve a smaller preset, then launch again",
    )
