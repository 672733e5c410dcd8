"""Where a project's and a run's files lie: the only place a file of a run is named.

    <root>/                           ProjectPaths
      .vot/environments/<name>.yaml   where a preset is served
      .vot/presets/<name>.yaml        what is served
      .vot/run/                       the unit ledger (units.json) and the units' own logs
      missions/<name>/                a mission (manifest, prompt, workspace, key)
      rulings/<run-id>.yaml           one rulings file per ruled run
      .llms-benchmark/README.md       the results page
      .llms-benchmark/*.yaml          the hand-kept rows (remote, oddyssey's local) and non-conclusive presets
      .llms-benchmark/refused/<id>/   a launch the preflight refused (nothing served): its folder, ignored by git
      .llms-benchmark/inconclusive/<id>/  a void, refused or fault run recorded by `inconclusive`: ignored by git
      .llms-benchmark/launches/       `launch --detach`: each background launch's log and <run-id>.json (pid)
      .llms-benchmark/runs/<run-id>/  RunPaths:
        run.json                      the run record (artifacts named relative to this folder)
        fault.txt                     a harness bug's traceback
        unit.log                      the unit's log, as collected
        served.jsonl                  replay only: what the script served
        opencode-provider.json        the provider file opencode reads
        opencode-events.jsonl         opencode's event stream of the mission
        opencode-stderr.log           its stderr
        opencode/                     the mission's isolated opencode HOME (XDG dirs, store)
        smoke/                        the smoke's events, stderr and opencode HOME
        agent-tmp/                    the agent's TMPDIR (one path for smoke and mission)
        workspace/                    the mission's workspace copy
        report.md                     the agent's report, copied out without following links
        telemetry.duckdb              the mission's telemetry store
        serving-timeline.jsonl        /metrics readings of the run window
        pace.jsonl                    the server's pace while the mission ran: each reading, each retune
        serving.jsonl                 per model call: store tokens joined with server figures
        wire.jsonl                    per model call, as the sandbox's bridge saw it (the run's figures)
        trajectory.json               the agent's steps in ATIF (harness/trajectory/atif_out.py)
        stop-request                  `llms-benchmark stop`: end the run once its report is persisted
        collect-pending.json          a trial whose launch died after its mission: what its collect needs

Frozen, one property per file (Harbor's `TrialPaths` is the model): a file moves here or nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_RECORD = "run.json"
TRAJECTORY = "trajectory.json"  # ATIF, written before the post-run scrub walks the folder


@dataclass(frozen=True)
class RunPaths:
    dir: Path

    @property
    def record(self) -> Path:
        return self.dir / RUN_RECORD

    @property
    def fault(self) -> Path:
        return self.dir / "fault.txt"

    @property
    def unit_log(self) -> Path:
        return self.dir / "unit.log"

    @property
    def served_log(self) -> Path:
        return self.dir / "served.jsonl"

    @property
    def provider_file(self) -> Path:
        return self.dir / "opencode-provider.json"

    @property
    def opencode_events(self) -> Path:
        return self.dir / "opencode-events.jsonl"

    @property
    def opencode_stderr(self) -> Path:
        return self.dir / "opencode-stderr.log"

    @property
    def opencode_home(self) -> Path:
        return self.dir / "opencode"

    @property
    def smoke(self) -> Path:
        return self.dir / "smoke"

    @property
    def agent_tmp(self) -> Path:
        return self.dir / "agent-tmp"

    @property
    def workspace(self) -> Path:
        return self.dir / "workspace"

    @property
    def report(self) -> Path:
        return self.dir / "report.md"

    @property
    def telemetry(self) -> Path:
        return self.dir / "telemetry.duckdb"

    @property
    def pace_timeline(self) -> Path:
        return self.dir / "pace.jsonl"

    @property
    def serving_timeline(self) -> Path:
        return self.dir / "serving-timeline.jsonl"

    @property
    def serving_table(self) -> Path:
        return self.dir / "serving.jsonl"

    @property
    def wire_log(self) -> Path:
        return self.dir / "wire.jsonl"

    @property
    def trajectory(self) -> Path:
        return self.dir / TRAJECTORY

    @property
    def collect_pending(self) -> Path:
        """What a trial's collect needs, kept before the destroy (harness/launcher/pending.py)."""
        return self.dir / "collect-pending.json"

    @property
    def stop_request(self) -> Path:
        """`llms-benchmark stop <run>` writes it; the running launch ends the run once its report is persisted."""
        return self.dir / "stop-request"


@dataclass(frozen=True)
class ProjectPaths:
    root: Path

    @property
    def vot(self) -> Path:
        return self.root / ".vot"

    @property
    def environments(self) -> Path:
        return self.vot / "environments"

    @property
    def presets(self) -> Path:
        return self.vot / "presets"

    @property
    def unit_run_dir(self) -> Path:
        """The ledger and the units' own logs."""
        return self.vot / "run"

    @property
    def missions(self) -> Path:
        return self.root / "missions"

    @property
    def bench(self) -> Path:
        return self.root / ".llms-benchmark"

    @property
    def runs(self) -> Path:
        return self.bench / "runs"

    @property
    def refused(self) -> Path:
        """Run folders of launches the preflight refused (nothing served): ignored by git."""
        return self.bench / "refused"

    @property
    def inconclusive(self) -> Path:
        """Run folders of void, refused or fault runs entered in non-conclusive.yaml (`llms-benchmark
        inconclusive`): kept, ignored by git (their entry is what is committed)."""
        return self.bench / "inconclusive"

    @property
    def launches(self) -> Path:
        """`launch --detach`: each background launch's output and its pid file (ignored by git)."""
        return self.bench / "launches"

    @property
    def page(self) -> Path:
        return self.bench / "README.md"

    @property
    def remote_rows(self) -> Path:
        return self.bench / "remote-rows.yaml"

    @property
    def oddyssey_local_rows(self) -> Path:
        return self.bench / "oddyssey-local-rows.yaml"

    @property
    def oddyssey_non_conclusive(self) -> Path:
        return self.bench / "oddyssey-non-conclusive.yaml"

    @property
    def non_conclusive(self) -> Path:
        return self.bench / "non-conclusive.yaml"

    @property
    def rulings(self) -> Path:
        return self.root / "rulings"

    def run(self, run_id: str) -> RunPaths:
        return RunPaths(self.runs / run_id)

    def rulings_file(self, run_id: str) -> Path:
        return self.rulings / f"{run_id}.yaml"
