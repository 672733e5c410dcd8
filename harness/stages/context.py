"""What a launch's stages share besides the run record: options, the run folder, the unit's
life, and the things that must never reach the record (the key, the log collector, the
mission's services, the agent's environment)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.sandbox import untrusted
from harness.mission import DEFAULT_MISSION
from harness.mission_services import MissionServices
from harness.opencode import config as oc_config
from harness.opencode.runner import RunResult
from harness.records.paths import RunPaths
from harness.run.preflight import Preflight
from harness.records.record import Probe, RunRecord
from harness.sandbox.confine import Sandbox
from harness.sandbox.limits import cgroup_name
from harness.sandbox.secret_forms import secrets_from
from harness.sandbox.stay import AgentStay, StayPlan
from harness.sandbox.untrusted import escape_controls, escape_name

TOOL_SHELL = "toolshell"  # beside the provider file
from harness.stacks.base import Unit
from harness.stacks.local_process import AGENT_MARKER_VAR
from harness.run.unitlog import UnitLogCollector
from harness.run.units import UnitLife
from harness.verdicts.drive_server import DriveServer

Say = Callable[[str], None]


@dataclass
class LaunchOptions:
    root: Path
    environment: str
    preset: str
    effort: str = "medium"
    mission: str = DEFAULT_MISSION
    probe_long_tokens: int | None = None  # None: 82k where the context allows
    sandbox: bool = True  # False: --no-sandbox (the record and the row say so)
    stop_after_report: int | None = None  # end the run N model turns after its report last changed
    trials: int = 1  # the mission run K times on one serve, each trial its own record


@dataclass
class LaunchContext:
    opts: LaunchOptions
    say: Say
    paths: RunPaths
    life: UnitLife
    pf: Preflight | None = None
    sandbox: Sandbox = field(default_factory=lambda: Sandbox("none"))
    secret_names: list[str] = field(default_factory=list)  # the preset's env names: their values are secrets
    secret_values: list[str | None] = field(default_factory=list)  # their values at preflight (before a mint)
    restore_env: dict[str, str | None] = field(default_factory=dict)  # variables the launch replaced (the minted key)
    untrusted: list[str] = field(default_factory=list)  # agent-written files the harness refused to read
    unclean: set[Path] = field(default_factory=set)  # agent folders the post-run could not vouch for: removed
    wire_counts: dict[Path, dict[str, int]] = field(default_factory=dict)  # per wire log: what the tap refused
    wire_decisive: list[str] = field(default_factory=list)  # wire/store disagreements past the tolerance
    stays: list[AgentStay] = field(default_factory=list)  # stays whose bounded disk the post-run releases
    services: MissionServices | None = None
    drive: DriveServer | None = None  # the services' drive server (`obs drive`), kept past their stop for the gate
    provider_file: Path | None = None
    argv_base: list[str] = field(default_factory=list)  # opencode's argv without its title
    workspace: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # the mission agent's environment
    title: str = ""
    result: RunResult | None = None
    report_snapshot: bytes | None = None  # the report as it stood at the harness's stop (collected after the destroy)
    pace_reference: Probe | None = None  # the best probe of this preset seen on this machine
    stall_floor_s: float | None = None  # the stall limits' floor at the probed pace (stages/serving.fits_smoke)

    @property
    def root(self) -> Path:
        return self.opts.root

    @property
    def unit(self) -> Unit:
        return self.life.unit

    @property
    def api_key(self) -> str | None:
        return self.life.api_key

    @property
    def collector(self) -> UnitLogCollector:
        return self.life.collector

    def agent_env(self, home: Path) -> dict[str, str]:
        env = oc_config.isolated_env(home, self.provider_file, self.unit.api_key_env, api_key=self.api_key,
                                     tmpdir=self.paths.agent_tmp)
        env[AGENT_MARKER_VAR] = self.unit.extra.get("marker", "")
        return env

    def secrets(self) -> list[str]:
        """Every value that must leave no trace: the unit's key, the preset's env values (now and
        as they were before a minted key replaced one)."""
        return secrets_from([self.api_key, *(os.environ.get(name) for name in self.secret_names),
                             *self.secret_values])

    def tool_shell(self) -> list[Path]:
        """The shell opencode runs the agent's tools with, when sandboxed (`sandbox.toolshell`):
        beside the provider file, which names it."""
        path = Path(self.provider_file).with_name(TOOL_SHELL) if self.provider_file else None
        return [path] if path is not None and path.is_file() else []

    @contextlib.contextmanager
    def confined(self, record: RunRecord, workdir: Path, home: Path, urls: list[str],
                 wire_log: Path | None = None) -> Iterator[AgentStay]:
        """One sandboxed opencode run, owned whole by `AgentStay` (network, view, caps, hand-over,
        hand-back, scrub); what it could not vouch for is failed closed here: named against the
        run and removed by the post-run."""
        # One TMPDIR path for the smoke and the mission (emptied between them): opencode names it
        # in its bash tool's description, so a path of its own would split the prompt cache.
        mission = home == self.paths.opencode_home  # its store and files are read after the stay
        plan = StayPlan(sandbox=self.sandbox, opencode=self.pf.opencode, workdir=workdir, home=home,
                        tmp=self.paths.agent_tmp, readable=[self.provider_file, *self.tool_shell()], urls=urls,
                        cgroup_name=cgroup_name(self.paths.dir.name), wire_log=wire_log,
                        image_name=f"{self.paths.dir.name}-{'mission' if mission else 'smoke'}", keep_image=mission)
        stay = AgentStay(plan, record.sandbox)
        try:
            with stay:
                yield stay
        finally:
            if stay.image is not None:  # the mission's: its store and files are read after the stay
                self.stays.append(stay)
            if wire_log is not None and stay.wire_counts:
                self.wire_counts[wire_log] = stay.wire_counts
            for path, why in stay.unclean.items():
                self.unclean.add(path)
                self.untrusted.append(f"the agent's {escape_controls(path.name)}/ could not be vouched for "
                                      f"({escape_name(why)})")

    def agent_folders(self) -> list[Path]:
        """Every folder the agent could write (the smoke's and the mission's)."""
        return [self.paths.workspace, self.paths.opencode_home, self.paths.agent_tmp, self.paths.smoke / "opencode"]

    def agent_text(self, relative: str, what: str) -> str:
        """An agent-writable file's text, read without following links ('' when absent or refused)."""
        try:
            return untrusted.read_text(self.workspace, relative, untrusted.RECORD_CAP)
        except FileNotFoundError:
            return ""
        except (untrusted.Refused, OSError) as exc:
            self.untrusted.append(f"the {what} was refused: {exc}")
            return ""

    def stop_services(self) -> None:
        services, self.services = self.services, None
        if services is not None:
            self.drive = getattr(services, "drive", None) or self.drive
            try:
                services.stop()
            except Exception as exc:  # never let it stand between us and destroy
                self.say(f"stopping the mission's services failed: {exc}")
