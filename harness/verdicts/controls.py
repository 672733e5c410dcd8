"""Control stores: the mission's scenario driven against its own stack with ONE planted defect
fixed, so that a finding's cited query can be asked whether it reads differently had that
defect not been planted.

A mission that ships `key/fixes.yaml` (each defect's fix as small find/replace edits of the
workspace sources, hidden from the agent like the rest of `key/`) gets, per mission version:

- `baseline-1`, `baseline-2`: the unfixed stack, driven twice (the run-to-run noise);
- one store per defect, `<defect id>`: that defect's fix applied, nothing else.

Each is the mission's own services (`infra/setup.py start`), driven by the scenario's short
mode (10 s, 2 virtual users: the key says every defect shows in it), stopped, and its
`telemetry.duckdb` kept under `~/.cache/llms-benchmark/controls/<mission>-<hash>/`, the folder's
hash over the mission's workspace, infra and manifest (a changed mission is a new set), each
control's file name also over its own fix (a changed fix rebuilds that control only). The set's
`manifest.json` records how long each took and its size.

    python -m harness.verdicts.controls build [--mission observability] [--only ID ...] [--duration S --vus N]
                                              [--for-run RUN_ID]   (a set driven as that run was)
    python -m harness.verdicts.controls table [--mission observability] [--store RUN.duckdb]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.errors import UserError
from harness.verdicts.drive_server import Refused as DriveRefused

BASELINES = ("baseline-1", "baseline-2")
DRIVE = {"duration": 10, "vus": 2}  # the short mode, as the replay trajectory asks
_HASHED = ("workspace", "infra", "mission.yaml")  # what every store of the set is driven from


@dataclass
class Fix:
    file: str
    find: str
    replace: str


def cache_root() -> Path:
    base = os.environ.get("LLMS_BENCHMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "llms-benchmark")
    return Path(base) / "controls"


def load_fixes(mission: Path) -> dict[str, list[Fix]]:
    """The mission's fixes, each checked against its sources (every `find` exactly once)."""
    path = Path(mission) / "key" / "fixes.yaml"
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"the fixes are not valid YAML: {exc}", file=path) from None
    raw = data.get("fixes") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise UserError("the fixes file has no `fixes` mapping (defect id -> list of edits)", file=path)
    out: dict[str, list[Fix]] = {}
    workspace = Path(mission) / "workspace"
    for defect, edits in raw.items():
        if not isinstance(edits, list) or not edits:
            raise UserError(f"fix of {defect} is not a list of edits", file=path, field=f"fixes.{defect}")
        fixes = []
        for i, e in enumerate(edits):
            if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("file", "find", "replace")):
                raise UserError(f"edit {i + 1} of {defect} needs file, find and replace (text)", file=path,
                                field=f"fixes.{defect}[{i}]")
            if e["find"].count("\n") != e["replace"].count("\n"):
                raise UserError(f"edit {i + 1} of {defect} changes the number of lines ({e['find'].count(chr(10))} "
                                f"line breaks found, {e['replace'].count(chr(10))} put back)", file=path,
                                field=f"fixes.{defect}[{i}]",
                                fix="keep every later line where it was (join statements with ';', pad with "
                                    "comment lines): a log record's code.line.number would otherwise tell the "
                                    "control from the run")
            fixes.append(Fix(e["file"], e["find"], e["replace"]))
        for f in fixes:
            source = workspace / f.file
            n = source.read_text(encoding="utf-8").count(f.find) if source.is_file() else -1
            if n != 1:
                raise UserError(f"the fix of {defect} finds its text {n if n >= 0 else 'in no such file'} "
                                f"time(s) in {f.file}, not once", file=path, field=f"fixes.{defect}",
                                fix="update the fix to the mission's current sources")
        out[str(defect)] = fixes
    return out


def apply(workspace: Path, fixes: list[Fix]) -> None:
    for f in fixes:
        path = Path(workspace) / f.file
        text = path.read_text(encoding="utf-8")
        if text.count(f.find) != 1:
            raise RuntimeError(f"fix text not found once in {f.file}")
        path.write_text(text.replace(f.find, f.replace), encoding="utf-8")


def mission_hash(mission: Path) -> str:
    h = hashlib.sha256()
    for name in _HASHED:
        root = Path(mission) / name
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in paths:
            if "__pycache__" in p.parts or p.suffix in (".pyc", ".duckdb") or p.name == "drive.json":
                continue
            h.update(p.relative_to(mission).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def controls_dir(mission: Path, drive: dict | None = None) -> Path:
    """The set's folder: the short mode's, or (issue 34) a set driven as a run was, `-120x5`."""
    suffix = "" if drive is None or _same(drive, DRIVE) else f"-{float(drive['duration']):g}x{int(drive['vus'])}"
    return cache_root() / f"{Path(mission).name}-{mission_hash(mission)}{suffix}"


def _same(a: dict, b: dict) -> bool:
    return float(a["duration"]) == float(b["duration"]) and int(a["vus"]) == int(b["vus"])


def fix_hash(fixes: list[Fix]) -> str:
    h = hashlib.sha256()
    for f in fixes:
        h.update(f"{f.file}\0{f.find}\0{f.replace}\0".encode())
    return h.hexdigest()[:12]


def store_name(name: str, fixes: dict[str, list[Fix]]) -> str:
    """A baseline is keyed by the mission's sources (the folder); a control also by its own fix,
    so that editing one fix rebuilds that control only."""
    return f"{name}.duckdb" if name in BASELINES else f"{name}.{fix_hash(fixes[name])}.duckdb"


def _setup(mission: Path):
    spec = importlib.util.spec_from_file_location(f"controls_setup_{Path(mission).name}",
                                                  Path(mission) / "infra" / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def drive_one(mission: Path, fixes: list[Fix], out: Path, drive: dict | None = None) -> dict:
    """Start the mission's services on a fixed copy of its workspace, drive the scenario (the
    short mode unless `drive` says otherwise), stop, and keep the store at `out`. Returns its figures."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llms-benchmark-control-") as tmp:
        run = Path(tmp)
        workspace = run / "workspace"
        shutil.copytree(Path(mission) / "workspace", workspace,
                        ignore=shutil.ignore_patterns("__pycache__", "drive.json", ".obs"))
        apply(workspace, fixes)
        services = _setup(mission).start(workspace, run, src=workspace / "src")
        try:  # the harness's own drive, as in a launch (`obs drive`): the same requests, tagged
            services.drive.drive(drive or DRIVE)
        except DriveRefused as exc:
            raise RuntimeError(f"the scenario failed on a control ({exc})") from None
        finally:
            services.stop()
        _check_store(run / "telemetry.duckdb")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = out.with_suffix(".tmp")
        shutil.copy2(run / "telemetry.duckdb", tmp_out)
        os.replace(tmp_out, out)
    return {"seconds": round(time.monotonic() - t0, 1), "bytes": out.stat().st_size}


SERVICES = ("shop-api", "shop-mcp", "shop-agent")


def _check_store(path: Path) -> None:
    """A control is a drive of the whole stack: every service wrote spans (a fix that breaks a
    service would otherwise make a store that shows every defect 'fixed')."""
    import duckdb

    with duckdb.connect(str(path), read_only=True) as con:
        seen = {r[0] for r in con.execute("SELECT DISTINCT service FROM spans").fetchall()}
    missing = [s for s in SERVICES if s not in seen]
    if missing:
        raise RuntimeError(f"the control drive has no spans of {', '.join(missing)}: the fix broke a service")


# How a store is accepted into the set (issue 64): it is checked against the key when built. A
# store whose planted defects do not read as planted (one left unfixed that does not show, its own
# fixed one that still shows) was driven by timing luck, not by the scenario: it is driven again,
# up to BUILD_TRIES times, and the set is refused if it never reads right. A set whose manifest
# does not record this check at CHECK_VERSION is not used (`Controls.for_mission`).
CHECK_VERSION = 2
BUILD_TRIES = 3


def _hides(mission: Path) -> dict[str, set[str]]:
    """Per fix, the other planted defects it also takes away, as the fixes file declares
    (`hides:` beside a fix: a cause and its consequence, such as the whole-table read and the
    rendering of what it read)."""
    path = Path(mission) / "key" / "fixes.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    raw = (data or {}).get("hides") or {}
    return {str(k): {str(x) for x in (v or [])} for k, v in raw.items()} if isinstance(raw, dict) else {}


def check_planted(mission: Path, name: str, store: Path) -> tuple[list[str], dict[str, bool]]:
    """Whether a store reads as planted: every defect its drive left unfixed shows (the key's
    evidence holds), and the one it fixed does not. (problems, defect id -> shows)."""
    from harness.verdicts.key import load_key
    from harness.verdicts.rerun_store import Store

    defects = load_key(Path(mission) / "key" / "defects.yaml")
    hidden = _hides(mission).get(name, set())
    shows: dict[str, bool] = {}
    problems: list[str] = []
    st = Store(store)
    try:
        for d in defects:
            runs = st.rerun(d)
            shows[d.id] = bool(runs) and all(r.holds for r in runs)
            got = "; ".join(f"{r.expect}: got {r.result}" for r in runs)
            if d.id == name and shows[d.id]:
                problems.append(f"{d.id} still shows with its fix applied ({got})")
            elif d.id != name and d.id not in hidden and not shows[d.id]:
                problems.append(f"{d.id} does not show although it is planted ({got})")
    finally:
        st.close()
    return problems, shows


def _box() -> dict:
    """What else the machine was doing while a store was driven: its load and its cores."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"loadavg": load, "cpus": os.cpu_count()}


def build(mission: Path, only: list[str] | None = None, say=print, drive: dict | None = None) -> Path:
    """Every control store of the mission (cached: a store already there and checked is kept),
    driven in the short mode, or as `drive` says (a set of its own, for runs driven that way);
    each checked against the key as it is built (`check_planted`), driven again when it does not
    read as planted, refused (UserError) when it never does."""
    mission = Path(mission)
    drive = drive or DRIVE
    fixes = load_fixes(mission)
    if not fixes:
        raise UserError("the mission ships no fixes, so it has no control stores", file=mission / "key" / "fixes.yaml")
    folder = controls_dir(mission, drive)
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"stores": {}}
    manifest.update(mission=mission.name, hash=mission_hash(mission), drive=drive, check=CHECK_VERSION)
    names = [*BASELINES, *fixes]
    for name in names:
        if only and name not in only:
            continue
        out = folder / store_name(name, fixes)
        known = manifest["stores"].get(name, {})
        if out.is_file() and known.get("file") == out.name and known.get("check") == CHECK_VERSION:
            continue
        tries: list[dict] = []
        for attempt in range(1, BUILD_TRIES + 1):
            say(f"control store {name}: driving the scenario ({drive['duration']:g} s, {drive['vus']} users)"
                + (f", try {attempt} of {BUILD_TRIES}" if attempt > 1 else ""))
            before = _box()
            figures = drive_one(mission, [] if name in BASELINES else fixes[name], out, drive)
            problems, shows = check_planted(mission, name, out)
            tries.append({**figures, "box_before": before, "box_after": _box(), "problems": problems})
            if not problems:
                break
            say(f"control store {name}: does not read as planted ({'; '.join(problems)}); driving it again")
        folder.mkdir(parents=True, exist_ok=True)
        if problems:
            out.unlink(missing_ok=True)
            manifest["stores"].pop(name, None)
            manifest_path.write_text(json.dumps(manifest, indent=2))
            raise UserError(f"control store {name} did not read as planted in {BUILD_TRIES} drives: "
                            f"{'; '.join(problems)}", file=mission / "key" / "fixes.yaml", field=f"fixes.{name}",
                            fix="a defect that shows by timing luck must be made to show by the scenario itself "
                                "(its rush, its data); a fix that takes another defect away too is declared "
                                "under `hides:`")
        manifest["stores"][name] = {"file": out.name, **tries[-1], "tries": len(tries), "check": CHECK_VERSION,
                                    "shows": shows}
        manifest_path.write_text(json.dumps(manifest, indent=2))
    return folder


def checked(folder: Path, fixes: dict[str, list[Fix]]) -> bool:
    """Whether every store of a set on disk was checked against the key when built, at CHECK_VERSION."""
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    stores = manifest.get("stores") if isinstance(manifest, dict) else None
    if not isinstance(stores, dict):
        return False
    for name in BASELINES:
        entry = stores.get(name)
        if not (isinstance(entry, dict) and entry.get("check") == CHECK_VERSION):
            return False
    return all(not (Path(folder) / store_name(n, fixes)).is_file()
               or (isinstance(stores.get(n), dict) and stores[n].get("check") == CHECK_VERSION
                   and stores[n].get("file") == store_name(n, fixes)) for n in fixes)


class Controls:
    """The control stores of one mission version, opened lazily and confined like the run's."""

    def __init__(self, folder: Path, fixes: dict[str, list[Fix]], drive: dict | None = None) -> None:
        self.folder = Path(folder)
        self.fixes = fixes
        self.drive = dict(drive or DRIVE)  # how every store of the set was driven
        self._cons: dict[tuple, object] = {}

    @classmethod
    def for_mission(cls, mission: Path, drive: dict | None = None) -> Controls | None:
        """The mission's control stores on this machine, for its current sources and fixes: the set
        driven as the run was (`drive`) when one was made, else the short mode's; None when it ships
        no fixes, the baselines were never made (`make setup` makes them), or the set on disk was
        not checked against the key when built (`checked`: such a set is rebuilt, never trusted)."""
        fixes = load_fixes(mission)
        if not fixes:
            return None
        for wanted in ([drive] if drive and not _same(drive, DRIVE) else []) + [DRIVE]:
            folder = controls_dir(mission, wanted)
            if all((folder / f"{b}.duckdb").is_file() for b in BASELINES) and checked(folder, fixes):
                return cls(folder, fixes, wanted)
        return None

    def path(self, name: str) -> Path | None:
        if name not in BASELINES and name not in self.fixes:
            return None
        return self.folder / store_name(name, self.fixes)

    def has(self, name: str) -> bool:
        path = self.path(name)
        return path is not None and path.is_file()

    SHELVES = 2  # shared connections kept (one per run clock; a rule uses one)

    def connection(self, name: str, align=None):
        """The store, confined; with `align` (a run's `timeshift.Clock`) its timeline laid onto the run's.
        Every store of the set is read through one DuckDB (`_Shelf`): one instance to start and to
        hold in memory, not one per store (an instance costs ~30 ms to open and ~70 MB, bounds.py)."""
        shelf = self._cons.pop(align, None)
        if shelf is None:
            while len(self._cons) >= self.SHELVES:
                self._cons.pop(next(iter(self._cons))).close()
            names = [n for n in (*BASELINES, *self.fixes) if self.has(n)]
            shelf = _Shelf({n: self.path(n) for n in names}, align)
        self._cons[align] = shelf  # most recently used last
        return shelf.view(name)

    def close(self) -> None:
        for shelf in self._cons.values():
            shelf.close()
        self._cons.clear()


class _Shelf:
    """Control stores attached read-only to one in-memory DuckDB, each with views of its signal tables
    (its timeline laid onto the run's) in a schema of its own, then confined as the run's store is
    (external access off, the configuration locked). A store's connection reads its own schema first."""

    def __init__(self, paths: dict[str, Path], align) -> None:
        import duckdb

        from harness.verdicts.evidence import _CONFIG
        from harness.verdicts.timeshift import confine, lay_views, open_config

        self.con = duckdb.connect(":memory:", config=open_config(_CONFIG))
        self.schemas: dict[str, str] = {}
        self._views: dict[str, _StoreView] = {}
        try:
            for i, (name, path) in enumerate(paths.items()):
                catalog, schema = f"_control_{i}", f"_views_{i}"
                self.con.execute(f"ATTACH ? AS {catalog} (READ_ONLY)", [str(path)])
                self.con.execute(f"CREATE SCHEMA {schema}")
                lay_views(self.con, catalog, align, schema)
                self.schemas[name] = schema
            confine(self.con, _CONFIG)
        except Exception:
            self.con.close()
            raise

    def view(self, name: str) -> _StoreView:
        if name not in self._views:
            self._views[name] = _StoreView(self.con, self.schemas[name])  # KeyError: not in the set
        return self._views[name]

    def close(self) -> None:
        for view in self._views.values():
            view.close()
        self.con.close()


class _StoreView:
    """One control store on its shelf: `cursor()` (what a cited query runs on: its own connection, so
    it can be interrupted alone) and `execute()`, both reading the store's views first. A query never
    sets the path back: only a lone SELECT is re-run (`readonly.check_read_only`)."""

    def __init__(self, con, schema: str) -> None:
        self._con, self.schema = con, schema
        self._own = None

    def cursor(self):
        cur = self._con.cursor()
        cur.execute(f"SET search_path = 'memory.{self.schema}'")
        return cur

    def execute(self, *args):
        if self._own is None:
            self._own = self.cursor()
        return self._own.execute(*args)

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None


def _first(con, sql: str):
    try:
        row = con.execute(sql).fetchone()
        return None if row is None else row[0]
    except Exception as exc:  # noqa: BLE001
        return f"error: {str(exc).splitlines()[0]}"


def table(mission: Path, store: Path | None = None) -> list[dict]:
    """Each planted defect's key queries on the run's store (when given), both baselines and
    the defect's own control store."""
    from harness.verdicts.evidence import open_store

    controls = Controls(controls_dir(mission), load_fixes(mission))
    key = yaml.safe_load((Path(mission) / "key" / "defects.yaml").read_text())["defects"]
    cons = {name: open_store(controls.path(name)) for name in BASELINES if controls.has(name)}
    run = open_store(store) if store else None
    rows = []
    try:
        for d in key:
            control = open_store(controls.path(d["id"])) if controls.has(d["id"]) else None
            try:
                for i, e in enumerate(d.get("evidence") or []):
                    sql = " ".join(str(e["sql"]).split())
                    rows.append({"defect": d["id"], "query": i + 1, "expect": e["expect"],
                                 "run": _first(run, sql) if run else None,
                                 **{b: _first(c, sql) for b, c in cons.items()},
                                 "control": _first(control, sql) if control else None})
            finally:
                if control is not None:
                    control.close()
    finally:
        for c in cons.values():
            c.close()
        if run is not None:
            run.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(prog="python -m harness.verdicts.controls")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--mission", default="observability")
    b.add_argument("--only", nargs="*")
    b.add_argument("--duration", type=float, help="drive each store this long (default: the short mode, 10 s)")
    b.add_argument("--vus", type=int, help="with this many users (default 2)")
    b.add_argument("--for-run", metavar="RUN_ID", help="drive each store as this run's drive was (its harness-drive records)")
    t = sub.add_parser("table")
    t.add_argument("--mission", default="observability")
    t.add_argument("--store", type=Path)
    a = p.parse_args(argv)
    mission = root / "missions" / a.mission
    if a.cmd == "build":
        import signal

        # A stop (SIGTERM) unwinds like Ctrl-C: the stack a drive started is stopped in its `finally`,
        # never left serving after the builder is gone.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        t0 = time.monotonic()
        drive = {"duration": a.duration or DRIVE["duration"], "vus": a.vus or DRIVE["vus"]}
        if a.for_run:
            from harness.records.paths import ProjectPaths
            from harness.verdicts.drive import run_drive

            if "/" in a.for_run or a.for_run in ("", ".", ".."):
                raise SystemExit(f"'{a.for_run}' is not a run id (a folder name under .llms-benchmark/runs/)")
            found = run_drive(ProjectPaths(root).run(a.for_run).dir)
            if found is None:
                raise SystemExit(f"run {a.for_run} has no harness drive record (harness-drive-*.json) to drive as")
            drive = {"duration": found["duration"], "vus": found["vus"]}
        try:
            folder = build(mission, a.only, say=lambda m: print(m, file=sys.stderr, flush=True), drive=drive)
        except UserError as exc:
            print(f"controls: {exc}", file=sys.stderr)
            return 2
        manifest = json.loads((folder / "manifest.json").read_text())
        total = sum(s["bytes"] for s in manifest["stores"].values())
        print(f"{folder}: {len(manifest['stores'])} stores, {total / 1e6:.1f} MB, built in "
              f"{time.monotonic() - t0:.0f} s")
        return 0
    for r in table(mission, a.store):
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
