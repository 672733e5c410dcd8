"""The drive gate and the harness's drive (`obs drive`), tried the way an agent would try
to fake a drive: the scenario's User-Agent from curl, a tag made up or taken from another
run, a tagged trace replayed after the drive; and the drive endpoint asked for too much.

The store here is a real DuckDB file with the store's own schema, its spans written as the
services write them; the real stack's drive is in test_verdicts and the launch tests."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import httpx
import pytest

from harness.telemetry.schema import create_all
from harness.verdicts.drive import MIN_REQUESTS, measure_drive, tag, tagged
from harness.verdicts.drive_server import DriveServer

UA = "llms-benchmark-scenario/"
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
KEY = bytes(range(32))


def ns(when: datetime) -> int:
    return int(when.timestamp() * 1e9)


def span(trace_id: str, at: datetime, ua: str = UA + "run-1", service: str = "shop-api", kind: str = "SERVER",
         parent: str | None = None) -> dict:
    attrs = json.dumps({"user_agent.original": ua})
    row = {"trace_id": trace_id, "span_id": f"{abs(hash((trace_id, service, at))) % 16**16:016x}",
           "parent_span_id": parent, "service": service, "name": "GET /products", "kind": kind,
           "start_ns": ns(at), "end_ns": ns(at) + 5_000_000, "duration_ms": 5.0, "status_code": "UNSET",
           "status_message": None, "attributes": attrs, "resource": "{}", "scope": "t", "events": "[]"}
    return row


def store(tmp_path: Path, spans: list[dict]) -> Path:
    path = tmp_path / "telemetry.duckdb"
    with duckdb.connect(str(path)) as con:
        create_all(con)
        if spans:
            cols = list(spans[0])
            con.executemany(f"INSERT INTO spans ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [tuple(s[c] for c in cols) for s in spans])
    return path


def drive_traces(key: bytes, n: int, start: datetime, vu: int = 1) -> list[dict]:
    """What the harness's drive leaves: one trace per request, each tagged, each with the
    downstream service's span of the same trace (its own User-Agent)."""
    out = []
    for i in range(1, n + 1):
        trace = tag(key, f"{vu:04x}{i:08x}")
        at = start + timedelta(milliseconds=200 * i)
        out.append(span(trace, at))
        out.append(span(trace, at + timedelta(milliseconds=1), ua="python-httpx/0.28", service="shop-mcp"))
    return out


def curls(n: int, start: datetime, ua: str = UA + "run-1") -> list[dict]:
    return [span(f"{i:032x}", start + timedelta(milliseconds=100 * i), ua=ua) for i in range(1, n + 1)]


WINDOW = (T0 + timedelta(seconds=10), T0 + timedelta(seconds=40))


def gate(path: Path, key=KEY, windows=(WINDOW,)):
    return measure_drive(path, UA, T0, T0 + timedelta(minutes=30), key=key,
                         windows=None if windows is None else list(windows))


def test_the_harness_drive_passes_and_the_agents_own_traffic_is_counted_beside_it(tmp_path: Path):
    path = store(tmp_path, [*drive_traces(KEY, 40, WINDOW[0]), *curls(7, T0 + timedelta(minutes=5), ua="curl/8.5")])
    figures = gate(path)
    assert figures.problem is None and figures.tagged_by == "harness key" and figures.harness_drives == 1
    assert figures.requests == 40 and figures.own_requests == 7 and figures.forged == 0
    assert WINDOW[0] < figures.start < figures.end < WINDOW[1]


def test_curl_with_the_scenario_user_agent_is_not_a_drive(tmp_path: Path):
    """The issue's forged drive: 25 plain GETs with the UA the agent reads in scenario/run.py."""
    path = store(tmp_path, curls(25, WINDOW[0]))
    figures = gate(path, windows=[])
    assert figures.requests == 0 and figures.forged == 25 and figures.own_requests == 25
    assert "never drove the stack" in figures.problem and "without the harness's tag" in figures.problem
    assert "obs drive" in figures.problem
    # Inside a real drive's window, too: the tag is what counts, not the timing.
    assert gate(path).requests == 0
    # What the gate did before the key (the User-Agent alone) lets it through: the hole this closes.
    assert measure_drive(path, UA, T0, T0 + timedelta(minutes=30)).problem is None


def test_a_made_up_or_borrowed_tag_is_not_the_harness_tag(tmp_path: Path):
    other_run = bytes(32)  # the tags of another run's key (a copied store, an old drive.json)
    made_up = [span(f"0001{i:08x}" + "0" * 20, WINDOW[0] + timedelta(milliseconds=i)) for i in range(1, 31)]
    path = store(tmp_path, [*drive_traces(other_run, 30, WINDOW[0]), *made_up])
    figures = gate(path)
    assert figures.requests == 0 and figures.forged == 60 and figures.problem
    assert not tagged(KEY, "0001000000011" + "a" * 19) and not tagged(KEY, "short")


def test_a_tagged_trace_replayed_after_the_drive_is_the_agents_own_traffic(tmp_path: Path):
    """Tagged ids are in the store for the agent to read; sent again later they neither count
    as the drive nor stretch its window."""
    drive = drive_traces(KEY, 25, WINDOW[0])
    later = T0 + timedelta(minutes=10)
    replayed = [dict(s, start_ns=ns(later) + k, end_ns=ns(later) + k + 1000, span_id=f"{k:016x}")
                for k, s in enumerate(drive[::2])]
    figures = gate(store(tmp_path, [*drive, *replayed]))
    assert figures.requests == 25 and figures.end < WINDOW[1]
    assert figures.own_requests == 25 and figures.forged == 25
    # With no harness drive at all, replayed tags are nothing.
    (tmp_path / "replayed-only").mkdir()
    alone = gate(store(tmp_path / "replayed-only", replayed), windows=[])
    assert alone.requests == 0 and "never drove the stack" in alone.problem


def test_too_short_a_drive_is_no_drive(tmp_path: Path):
    figures = gate(store(tmp_path, drive_traces(KEY, MIN_REQUESTS - 1, WINDOW[0])))
    assert figures.requests == MIN_REQUESTS - 1 and "at least 20 needed" in figures.problem


# --- the drive endpoint -----------------------------------------------------------------------------

FAKE_SCENARIO = '''
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--out") + 1]
duration = float(args[args.index("--duration") + 1])
key = os.environ.get("DRIVE_TAG_KEY", "")
if os.environ.get("FAKE_SCENARIO_SLEEP"):
    time.sleep(float(os.environ["FAKE_SCENARIO_SLEEP"]))
json.dump({"start": "s", "end": "e", "duration_s": duration, "vus": int(args[args.index("--vus") + 1]),
           "requests": {"GET /products": 3}, "errors": {}, "targets": {"api": os.environ.get("SHOP_API_URL")},
           "key_length": len(key), "key_in_env": sorted(k for k in os.environ if "KEY" in k)}, open(out, "w"))
'''


@pytest.fixture
def scenario_root(tmp_path: Path) -> Path:
    root = tmp_path / "mission-workspace"
    (root / "scenario").mkdir(parents=True)
    (root / "scenario" / "__init__.py").write_text("")
    (root / "scenario" / "__main__.py").write_text(FAKE_SCENARIO)
    return root


def test_the_drive_endpoint_runs_the_missions_scenario_with_the_key_the_agent_never_sees(
        scenario_root: Path, tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    with DriveServer(scenario_root, {"SHOP_API_URL": "http://127.0.0.1:9"}, run, max_drives=2) as server:
        r = httpx.post(f"{server.url}/drive", json={"duration": 3, "vus": 2}, timeout=30)
        assert r.status_code == 200, r.text
        record = r.json()
        assert record["vus"] == 2 and record["key_length"] == 64 and "targets" not in record
        assert record["key_in_env"] == ["DRIVE_TAG_KEY"]  # and nothing else of the launch's
        assert server.key.hex() not in r.text
        assert server.key.hex() not in (run / "harness-drive-1.log").read_text()
        assert json.loads((run / "harness-drive-1.json").read_text())["duration_s"] == 3
        # Bounds, refused before anything runs.
        for ask in ({"duration": 0}, {"duration": 10_000}, {"vus": 99}, {"vus": "x"}, [1, 2]):
            r = httpx.post(f"{server.url}/drive", json=ask, timeout=10)
            assert r.status_code == 400, (ask, r.text)
        assert httpx.post(f"{server.url}/drive", content=b"{" * 5000, timeout=10).status_code == 413
        assert httpx.post(f"{server.url}/drive", json={"duration": 1}, timeout=30).status_code == 200
        r = httpx.post(f"{server.url}/drive", json={"duration": 1}, timeout=30)
        assert r.status_code == 429 and "the most it runs" in r.json()["error"]
        assert len(server.windows()) == 2 and all(a < b for a, b in server.windows())


def test_one_drive_at_a_time_and_a_drive_under_way_ends_with_the_services(
        scenario_root: Path, tmp_path: Path):
    import threading

    run = tmp_path / "run"
    run.mkdir()
    server = DriveServer(scenario_root, {"FAKE_SCENARIO_SLEEP": "60"}, run)
    first: dict = {}
    thread = threading.Thread(target=lambda: first.update(
        r=httpx.post(f"{server.url}/drive", json={"duration": 2}, timeout=120)))
    thread.start()
    try:
        for _ in range(100):  # bounded: until the first drive has started
            if server.drives:
                break
            threading.Event().wait(0.05)
        r = httpx.post(f"{server.url}/drive", json={"duration": 2}, timeout=10)
        assert r.status_code == 409 and "already running" in r.json()["error"]
    finally:
        server.close()  # the launch stops its services: the scenario is ended, not waited for
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert server.drives[0]["exit_code"] != 0


def test_obs_drive_writes_the_record_where_the_prompt_says(scenario_root: Path, tmp_path: Path):
    import subprocess

    run = tmp_path / "run"
    run.mkdir()
    work = tmp_path / "agent-workspace"
    (work / "scenario").mkdir(parents=True)
    with DriveServer(scenario_root, {}, run) as server:
        env = {"PATH": "/usr/bin:/bin", "OBS_DRIVE_URL": server.url, "OBS_LOG": str(work / ".obs" / "calls.jsonl")}
        done = subprocess.run([sys.executable, "-m", "harness.telemetry.obs", "drive", "--duration", "2",
                               "--vus", "1"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "GET /products" in done.stdout and "scenario/drive.json" in done.stdout
    assert json.loads((work / "scenario" / "drive.json").read_text())["vus"] == 1
    call = json.loads((work / ".obs" / "calls.jsonl").read_text().splitlines()[-1])
    assert call["signal"] == "drive" and call["ok"] is True
    # No endpoint: a clear refusal, exit 1; an endpoint that is down: exit 2.
    env.pop("OBS_DRIVE_URL")
    done = subprocess.run([sys.executable, "-m", "harness.telemetry.obs", "drive"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "OBS_DRIVE_URL is not set" in done.stderr
    env["OBS_DRIVE_URL"] = server.url  # closed above
    done = subprocess.run([sys.executable, "-m", "harness.telemetry.obs", "drive"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not reachable" in done.stderr
