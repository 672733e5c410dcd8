"""What a launch's stages share besides the run record: options, the run folder, the unit's
life, and the things that must never reach the record (the key, the log collector, the
mission's services, the agent's environment)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.sandbox import untrusted
from harness.mission import DEFAULT_MISSION
from harness.mission_services import MissionServices
from harness.opencode import config as oc_config
from harness.opencode.runner import RunResult
from harness.paths import RunPaths
from harness.preflight import Preflight
from harness.record import RunRecord
from harness.sandbox.confine import Sandbox, View, agent_view, describe_caps
from harness.sandbox.identity import AgentIdentity, agent_identity, hand_over, take_back
from harness.sandbox.limits import DiskWatch, cgroup_name, make_cgroup
from harness.sandbox.wirelog import WireLog
from harness.sandbox.net import Bridge, bridge, is_loopback_url, loopback_ports
from harness.sandbox.peers import origin_of
from harness.stacks.base import Unit
from harness.stacks.local_process import AGENT_MARKER_VAR
from harness.unitlog import UnitLogCollector
from harness.units import UnitLife
from harness.verdicts.drive_server import DriveServer

Say = Callable[[str], None]


@dataclass
class Confined:
    """What one sandboxed run is given (its view, the disk guard) and what its caps refused."""

    view: View
    disk: DiskWatch
    hits: list[str] = field(default_factory=list)


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
    services: MissionServices | None = None
    drive: DriveServer | None = None  # the services' drive server (`obs drive`), kept past their stop for the gate
    provider_file: Path | None = None
    argv_base: list[str] = field(default_factory=list)  # opencode's argv without its title
    workspace: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # the mission agent's environment
    title: str = ""
    result: RunResult | None = None

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

    def view(self, workdir: Path, home: Path, net=None) -> View:
        # One TMPDIR path for the smoke and the mission (emptied between them): opencode names it
        # in its bash tool's description, so a path of its own would split the prompt cache.
        view = agent_view([workdir, home, self.paths.agent_tmp], self.pf.opencode, [self.provider_file])
        view.net = net
        return view

    @contextlib.contextmanager
    def confined(self, record: RunRecord, workdir: Path, home: Path, urls: list[str],
                 wire_log: Path | None = None) -> Iterator[Confined]:
        """One sandboxed opencode run: its network, its view, its caps and cgroup, its folders
        handed to the agent's user; afterwards what the caps refused goes on the record and
        the folders are the launcher's again."""
        home.mkdir(parents=True, exist_ok=True)
        who = agent_identity()
        net = None
        try:
            with self.network(record, urls, who, wire_log) as net:
                yield from self._stay(record, workdir, home, who, net)
        finally:
            if isinstance(net, Bridge) and net.wire is not None:  # read once the bridge is closed
                log = net.wire[1]
                self.wire_counts[log.path] = {"broken": log.broken, "unparsed": log.unparsed, "refused": net.refused}

    def _stay(self, record: RunRecord, workdir: Path, home: Path, who: AgentIdentity, net) -> Iterator[Confined]:
        """The stay itself: the view, the caps and cgroup, the hand-over; after it, the caps' refusals and the hand-back."""
        view = self.view(workdir, home, net)
        view.who = who  # the one the bridge's sockets were handed to
        if self.sandbox.kind == "bwrap":
            view.cgroup = make_cgroup(cgroup_name(self.paths.dir.name), view.caps)
        disk = DiskWatch(view.writable, view.caps.disk_bytes, netns=net.netns if isinstance(net, Bridge) else None)
        done = Confined(view, disk)
        if self.sandbox.kind == "bwrap":
            hand_over(view.writable, who)
            record.sandbox.agent_user = who.describe
            record.sandbox.limits = describe_caps(view)
        try:
            yield done
        finally:
            if view.cgroup is not None:
                done.hits += view.cgroup.hits()
                view.cgroup.remove()
            if disk.hit:
                done.hits.append(disk.hit)
            for path, why in take_back(view.writable, who).items():
                # Not vouched for: removed by the post-run, and no row on this run.
                self.unclean.add(path)
                self.untrusted.append(f"the agent's {path.name}/ could not be taken back ({why})")

    def network(self, record: RunRecord, urls: list[str], who: AgentIdentity | None = None,
                wire_log: Path | None = None):
        """The agent's own network namespace, with the loopback ports among `urls` forwarded
        into it (the unit, the mission's services). A unit served elsewhere (azure) is not
        on loopback: the agent then keeps the host's network, and the record says so."""
        isolated = self.sandbox.enabled and is_loopback_url(urls[0])
        if record.sandbox is not None:
            record.sandbox.network = {"bwrap": "own namespace", "sandbox-exec": "loopback ports only"}.get(
                self.sandbox.kind, "host") if isolated else (
                "host (the unit is not on loopback)" if self.sandbox.enabled else "host")
        model_port = loopback_ports(urls[:1])
        wire = (model_port[0], WireLog(wire_log)) if wire_log is not None and model_port else None
        origin = functools.partial(origin_of, opencode=self.pf.opencode) if self.pf is not None else None
        return bridge(self.sandbox.kind if isolated else None, loopback_ports(urls),
                      who if self.sandbox.kind == "bwrap" else None, wire, origin)

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
