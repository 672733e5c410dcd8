"""One owner for the agent's whole stay: `AgentStay`, a context manager the stage enters once.

Entering: the agent's own network (the bridge and its wire log), its view, its caps (cgroup
where offered, the disk watcher), its folders handed to the agent's user. Inside: the
command wrapped for the sandbox (`argv`). Leaving, in this order and whatever happened:
the caps' refusals collected, the cgroup removed, the bridge closed (what the tap refused
counted), the folders taken back by descriptor. The secrets are scrubbed out of them by
the launch's post-run, after the unit is destroyed (no scrub of hostile files bills the
unit's time). A folder the hand-back could not vouch for is named in `unclean` with why:
the launch removes it and no row stands on the run (fail closed). Afterwards `denials(events)` counts what the
sandbox refused from opencode's own events and the caps' counters.

So no post-run step can be forgotten, run out of order, or run on the agent's files with
the launcher's rights following links.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from harness.records.record import SandboxFigures
from harness.sandbox import diskimage
from harness.sandbox.confine import Sandbox, View, agent_view, describe_caps, wrap
from harness.sandbox.denials import count_denials
from harness.sandbox.identity import AgentIdentity, agent_identity, hand_over, take_back
from harness.sandbox.limits import DiskWatch, make_cgroup
from harness.sandbox.net import Bridge, bridge, is_loopback_url, loopback_ports
from harness.sandbox.peers import origin_of
from harness.sandbox.wirelog import WireLog


@dataclass
class StayPlan:
    """What a stay is made of: where the agent works, what it may reach, what the harness keeps."""

    sandbox: Sandbox
    opencode: Path  # the binary (its folder read-only inside; the wire's turns are its calls)
    workdir: Path
    home: Path  # its opencode HOME (XDG dirs, the session store)
    tmp: Path  # its TMPDIR
    readable: list[Path]  # besides the system: the provider file
    urls: list[str]  # the unit first, then the mission's services: their loopback ports are forwarded
    cgroup_name: str
    wire_log: Path | None = None
    # As root: the folders on a bounded image named so (None: watched only). `keep_image`: left
    # mounted past the stay (the mission's store is read after it), released by the launch's post-run.
    image_name: str | None = None
    keep_image: bool = False


class AgentStay:
    def __init__(self, plan: StayPlan, figures: SandboxFigures | None) -> None:
        self.plan, self.figures = plan, figures
        self.who: AgentIdentity = agent_identity()
        self.view: View | None = None
        self.disk: DiskWatch | None = None
        self.net: Bridge | None = None
        self.hits: list[str] = []  # what the caps refused (cgroup, disk watcher)
        self.unclean: dict[Path, str] = {}  # agent folders the stay could not vouch for, and why
        self.wire_counts: dict[str, int] = {}  # what the tap refused: broken, unparsed, refused
        self.image: diskimage.AgentDisk | None = None  # the bounded filesystem under the folders (root)
        self._exit = ExitStack()

    # -- in
    def __enter__(self) -> AgentStay:
        plan = self.plan
        plan.home.mkdir(parents=True, exist_ok=True)
        try:
            net = self._exit.enter_context(self._network())
            self.net = net if isinstance(net, Bridge) else None
            self.view = agent_view([plan.workdir, plan.home, plan.tmp], plan.opencode, plan.readable)
            self.view.net, self.view.who = net, self.who
            if plan.sandbox.kind == "bwrap":
                self.view.cgroup = make_cgroup(plan.cgroup_name, self.view.caps)
                self._bounded_disk()
            self.disk = DiskWatch(self.view.writable, self.view.caps.disk_bytes,
                                  netns=self.net.netns if self.net is not None else None)
            if plan.sandbox.kind == "bwrap":
                hand_over(self.view.writable, self.who)
                if self.figures is not None:
                    self.figures.agent_user = self.who.describe
                    self.figures.limits = describe_caps(self.view)
                    if self.image is not None:
                        self.figures.limits["disk"] += (f"; its folders on an ext4 image of "
                                                         f"{self.image.size / (1 << 30):.2f} GiB (a hard bound)")
        except BaseException:
            self._leave()
            self.release_image()
            raise
        return self

    def _bounded_disk(self) -> None:
        """As root where loop devices exist: the writable folders on an image of bounded size."""
        if self.plan.image_name is None or not diskimage.available():
            return
        image = diskimage.AgentDisk(self.plan.image_name, self.view.caps.disk_bytes)
        try:
            image.mount(self.view.writable)
        except diskimage.Unavailable:
            return  # the watcher alone, as for a user; describe_caps says so
        self.image = image

    def release_image(self, keep: tuple[Path, ...] = ()) -> list[str]:
        """The bounded disk let go: `keep`'s folders copied back off it, the rest discarded."""
        image, self.image = self.image, None
        return image.release(keep) if image is not None else []

    def _network(self):
        """The agent's own network namespace, with the loopback ports among the urls forwarded
        into it. A unit served elsewhere (azure) is not on loopback: the agent then keeps the
        host's network, and the record says so."""
        plan, kind = self.plan, self.plan.sandbox.kind
        isolated = plan.sandbox.enabled and is_loopback_url(plan.urls[0])
        if self.figures is not None:
            self.figures.network = {"bwrap": "own namespace", "sandbox-exec": "loopback ports only"}.get(
                kind, "host") if isolated else ("host (the unit is not on loopback)" if plan.sandbox.enabled else "host")
        model_port = loopback_ports(plan.urls[:1])
        wire = (model_port[0], WireLog(plan.wire_log)) if plan.wire_log is not None and model_port else None
        return bridge(kind if isolated else None, loopback_ports(plan.urls), self.who if kind == "bwrap" else None,
                      wire, functools.partial(origin_of, opencode=plan.opencode, pinned=[]))

    def argv(self, command: list[str], profile_dir: Path) -> list[str]:
        """`command` as it runs inside the sandbox, in the stay's working folder."""
        return wrap(self.plan.sandbox, command, self.view, self.plan.workdir, profile_dir)

    # -- out
    def __exit__(self, *exc) -> None:
        self._leave()

    def _leave(self) -> None:
        view = self.view
        try:
            if view is not None and view.cgroup is not None:
                self.hits += view.cgroup.hits()
                view.cgroup.remove()
            if self.disk is not None and self.disk.hit:
                self.hits.append(self.disk.hit)
        finally:
            self._exit.close()  # the bridge: closed before its counts are read
        if self.net is not None and self.net.wire is not None:
            log = self.net.wire[1]
            self.wire_counts = {"broken": log.broken, "unparsed": log.unparsed, "refused": self.net.refused}
        if view is None:
            return
        self.unclean.update(take_back(view.writable, self.who))
        # No scrub here: the unit still bills while the stay ends (a hostile store once held it
        # 658 s more); the launch's post-run scrubs every folder after the destroy.
        if not self.plan.keep_image:
            for problem in self.release_image():
                self.unclean.setdefault(view.writable[0], problem)

    def denials(self, events: Path) -> tuple[int, list[str]]:
        """What the sandbox refused, from opencode's events and the caps' counters."""
        return count_denials(events, self.view, self.plan.workdir, self.hits)
