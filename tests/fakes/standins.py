"""A stand-in `docker` CLI for tests, and the stand-in tools (`nvidia-smi`, `uname`,
`sysctl`, `sw_vers`) the GPU stacks ask.

Every stand-in records its argv (one JSON line per call in `<state>/calls.jsonl`) and
answers as the real tool does. The stand-in docker keeps its containers under
`<state>/containers/<id>/`, and a "container" really runs: `docker run -d` starts a
detached supervisor (its own session, like a container outliving the CLI) that plays the
image's entrypoint `vllm serve <model> ...` with the replay server listening on the mapped
loopback port, so `/v1/models` answers exactly as vLLM's would. The supervisor stamps each
line of the container's stdout/stderr with a nanosecond time, as docker's json-file log
driver does, and `docker logs --timestamps --since` reads them back.

Behaviour switches live in `<state>/config.json`:
  trajectory   the trajectory the container's replay server plays (required to serve)
  info_fails   `docker info` exits 1 as with a stopped daemon
  mode         serve (default) | fatal (logs vLLM's EngineCore failure, exits 1 as vLLM 0.32 does) | exit
  no_gpu       `docker run --gpus` creates the container, then fails to start it (exit 125),
               as without the NVIDIA Container Toolkit

The stand-in `vllm` (for the local-vllm and local-vllm-metal stacks) records its argv, refuses
an option the real `vllm serve` 0.32 does not take (exit 2, argparse's line; the list in
vllm_serve_flags.txt was read from the real one) and execs the replay server on `--port` with
`--served-model-name`, playing `trajectory`.

Shims are written by `install()`; each runs this file with the test's Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from harness.atomic import write_atomic

HERE = Path(__file__).resolve()
LABEL_ID = 12


def write_json(path: Path, data) -> None:
    """Replace `path` whole: a stand-in reading it while another writes it (the container process
    reading its meta.json as `docker run` marks it running, a `docker inspect` from the launch)
    sees the old file or the new one, never a half-written one."""
    write_atomic(path, json.dumps(data))


# -- recording and the simple tools -----------------------------------------------------------
def record(state: Path, tool: str, argv: list[str]) -> None:
    with open(state / "calls.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"tool": tool, "argv": argv, "t": time.time()}) + "\n")


def calls(state: Path, tool: str | None = None) -> list[list[str]]:
    path = state / "calls.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [[r["tool"], *r["argv"]] for r in rows if tool is None or r["tool"] == tool]


def simple_tool(state: Path, tool: str, argv: list[str]) -> int:
    """Answer from `<state>/tools.json`: {tool: {"<args joined by space>": [rc, stdout]}}."""
    record(state, tool, argv)
    answers = json.loads((state / "tools.json").read_text()).get(tool, {})
    key = " ".join(argv)
    found = answers.get(key, answers.get("*"))
    if found is None:
        sys.stderr.write(f"{tool}: unexpected arguments: {key}\n")
        return 2
    rc, out = found
    sys.stdout.write(out)
    return rc


def install(bin_dir: Path, state: Path, tools: dict[str, dict[str, list]] | None = None, *,
            docker: bool = True, vllm: bool = False) -> None:
    """Shims in bin_dir: docker and/or vllm, and simple tools answering from `tools`
    ({tool: {"<args>" or "*": [exit code, stdout]}}, kept in state/tools.json)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (state / "containers").mkdir(parents=True, exist_ok=True)
    if not (state / "config.json").exists():
        write_json(state / "config.json", {})
    write_json(state / "tools.json", tools or {})
    for name in ("docker", "vllm", *(tools or {})):
        (bin_dir / name).unlink(missing_ok=True)
    named = ["docker"] * docker + ["vllm"] * vllm
    for tool in (*named, *(tools or {})):
        shim = bin_dir / tool
        shim.write_text(textwrap.dedent(f"""\
            #!{sys.executable}
            import sys
            sys.path.insert(0, {str(HERE.parent)!r})
            import standins
            sys.exit(standins.entry({str(state)!r}, {tool!r}, sys.argv[1:]))
            """))
        shim.chmod(0o755)


def configure(state: Path, **changes) -> None:
    path = state / "config.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    write_json(path, data)


def entry(state: str, tool: str, argv: list[str]) -> int:
    state_dir = Path(state)
    if tool == "vllm":
        return vllm(state_dir, argv)
    if tool != "docker":
        return simple_tool(state_dir, tool, argv)
    record(state_dir, "docker", argv)
    return Docker(state_dir).main(argv)


SERVE_FLAGS = frozenset(line.strip() for line in (HERE.parent / "vllm_serve_flags.txt").read_text().splitlines()
                       if line.strip() and not line.startswith("#"))
# What the real vLLM 0.32 prints as it exits 2 on an option it does not know (argparse's usage).
USAGE = ("usage: vllm [-h] [-v]\n"
         "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n"
         "            ...\n")


def _known(name: str) -> tuple[bool, list[str]]:
    """(known, ambiguous matches): argparse also takes a unique prefix of a long option."""
    if name in SERVE_FLAGS:
        return True, []
    matches = sorted(f for f in SERVE_FLAGS if name.startswith("--") and f.startswith(name))
    return len(matches) == 1, matches if len(matches) > 1 else []


def parse_error(args: list[str]) -> str | None:
    """argparse's error line for the options of `vllm serve <model> ...` the real vLLM 0.32 would
    not parse (None: it would). Its parser reads `--max_model_len` as `--max-model-len`,
    `--flag=value`, `--config.key` / `-cc.key` dotted into a JSON option, and a unique prefix of
    a long option as that option; an unknown option is listed with the values after it."""
    out: list[str] = []
    stray = False
    for token in args:
        if token.startswith("-") and len(token) > 1 and not token[1:2].isdigit():
            name = token.split("=", 1)[0]
            dashes = len(name) - len(name.lstrip("-"))
            name = name[:dashes] + name[dashes:].replace("_", "-")
            known, ambiguous = _known(name.split(".", 1)[0])
            if ambiguous:
                return f"vllm: error: ambiguous option: {token.split('=', 1)[0]} could match {', '.join(ambiguous)}"
            stray = not known
            if stray:
                out.append(token)
        elif stray:
            out.append(token)
    return f"vllm: error: unrecognized arguments: {' '.join(out)}" if out else None


def vllm(state: Path, argv: list[str]) -> int:
    """`vllm serve <model> --host H --port P --served-model-name S ...`: the replay server instead.

    As the real vLLM 0.32: an option `vllm serve` does not know exits 2 with argparse's line; the
    `fatal` mode logs the engine's failure and exits 1 a moment later (it does not keep running)."""
    record(state, "vllm", argv)
    config = json.loads((state / "config.json").read_text())
    if argv[:1] != ["serve"] or len(argv) < 2:
        sys.stderr.write("vllm: the stand-in plays `vllm serve <model> ...` only\n")
        return 2
    if error := parse_error(argv[2:]):
        sys.stderr.write(USAGE + error + "\n")
        return 2
    if config.get("mode") == "fatal":
        engine_failure(lambda line: print(line, flush=True))
        return 1

    def arg(flag: str, default: str) -> str:
        return argv[argv.index(flag) + 1] if flag in argv else default

    engine_started(lambda line: print(line, flush=True), arg("--max-model-len", "65536"))
    os.execv(sys.executable, [sys.executable, "-m", "harness.replay.server", "--trajectory", config["trajectory"],
                              "--host", arg("--host", "127.0.0.1"), "--port", arg("--port", "8000"),
                              "--served-model-name", arg("--served-model-name", argv[1]),
                              "--max-model-len", arg("--max-model-len", "65536")])
    return 0  # not reached


def engine_failure(emit) -> None:
    """The real vLLM 0.32's failed engine start, in its order (read from its log): the engine core's
    error, then the API server's RuntimeError as it gives up; the process then exits 1 (it does not
    keep running, as the stand-ins once did). The pause stands in for its shutdown."""
    emit("(EngineCore pid=2) INFO [cpu_model_runner.py:68] Starting to load model ...")
    emit("(EngineCore pid=2) ERROR [core.py:1510] EngineCore failed to start.")
    emit("(EngineCore pid=2) ERROR [core.py:1510] ValueError: To serve at least one request with the model's max "
         "seq len (131072), (2.81 GiB KV cache is needed, which is larger than the available KV cache memory (2.0 "
         "GiB). Based on the available memory, the estimated maximum model length is 93056. Try increasing "
         "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` "
         "when initializing the engine.")
    time.sleep(FATAL_EXIT_DELAY_S)
    emit("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
         "Failed core proc(s): {'EngineCore_DP0': 1}")


FATAL_EXIT_DELAY_S = 2.0


def engine_started(emit, max_model_len: str) -> None:
    """What a GPU vLLM 0.32 logs about its KV cache once the engine is up (the figures are one A100
    80 GB's at --gpu-memory-utilization 0.92 for a 27B FP8 model; the stack reads the lines, not them)."""
    emit("(EngineCore_DP0 pid=2) INFO [gpu_worker.py:298] Available KV cache memory: 31.42 GiB")
    emit(f"(EngineCore_DP0 pid=2) INFO [kv_cache_utils.py:2327] GPU KV cache size: 514,752 tokens, Maximum "
         f"concurrency for {int(max_model_len):,} tokens per request: {514752 / int(max_model_len):.2f}x")


# -- containers ----------------------------------------------------------------------------------
def stamp(ns: int) -> str:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def parse_since(value: str) -> int:
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$", value)
    if m:
        import calendar
        secs = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
        return secs * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))
    secs, _, frac = value.partition(".")
    return int(secs) * 1_000_000_000 + int(frac.ljust(9, "0") or 0)


class Container:
    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.meta = json.loads((folder / "meta.json").read_text())

    @property
    def id(self) -> str:
        return self.meta["id"]

    @property
    def name(self) -> str:
        return self.meta["name"]

    def save(self) -> None:
        write_json(self.dir / "meta.json", self.meta)

    def processes(self):
        import psutil

        pid = self.meta.get("pid")
        if not pid:
            return []
        try:
            proc = psutil.Process(pid)
            if proc.create_time() != self.meta.get("pid_started"):
                return []
            found = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        live = []
        for p in found:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    live.append(p)
            except psutil.NoSuchProcess:
                continue
        return live

    @property
    def running(self) -> bool:
        return self.meta.get("status") == "running" and not (self.dir / "exit").exists() and bool(self.processes())

    @property
    def status(self) -> str:
        if self.meta.get("status") == "created":
            return "created"
        return "running" if self.running else "exited"

    def kill(self) -> None:
        import psutil

        procs = self.processes()
        if procs:
            try:
                os.killpg(self.meta["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for p in procs:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=10)

    def inspect(self) -> dict:
        return {
            "Id": self.id, "Name": "/" + self.name, "Created": stamp(self.meta["created"]),
            # The image's own id (docker: the sha256 of its config), as a real container names it.
            "Image": "sha256:" + hashlib.sha256(self.meta["image"].encode()).hexdigest(),
            "State": {"Status": self.status, "Running": self.running, "Pid": self.meta.get("pid") or 0},
            "Config": {"Image": self.meta["image"], "Cmd": self.meta["cmd"], "Labels": self.meta["labels"],
                       "Env": [f"{k}=..." for k in self.meta["env"]]},
            "HostConfig": {"IpcMode": self.meta["ipc"], "Binds": self.meta["binds"],
                           "PortBindings": self.meta["ports"], "DeviceRequests": self.meta["gpus"]},
        }


class Docker:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.root = state / "containers"
        self.config = json.loads((state / "config.json").read_text())

    def containers(self) -> list[Container]:
        out = []
        for folder in sorted(self.root.iterdir()):
            try:
                out.append(Container(folder))
            except FileNotFoundError:  # being created (no meta yet) or removed by a `docker rm`
                continue
        return out

    def find(self, ref: str) -> Container | None:
        for c in self.containers():
            if ref in (c.id, c.name, "/" + c.name) or (len(ref) >= 4 and c.id.startswith(ref)):
                return c
        return None

    def main(self, argv: list[str]) -> int:
        if not argv:
            sys.stderr.write("Usage:  docker [OPTIONS] COMMAND\n")
            return 1
        command, args = argv[0], argv[1:]
        handler = getattr(self, "cmd_" + command, None)
        if handler is None:
            sys.stderr.write(f"docker: unknown command: docker {command}\n")
            return 1
        return handler(args)

    # docker info ------------------------------------------------------------------------------
    def cmd_info(self, args: list[str]) -> int:
        if self.config.get("info_fails"):
            sys.stderr.write("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                             "Is the docker daemon running?\n")
            return 1
        if args[:2] == ["--format", "{{.ServerVersion}}"]:
            print("27.3.1")
        else:
            print("Server:\n Server Version: 27.3.1\n Runtimes: io.containerd.runc.v2 nvidia runc")
        return 0

    # docker run -------------------------------------------------------------------------------
    def cmd_run(self, args: list[str]) -> int:
        opts: dict[str, list[str]] = {}
        flags = set()
        i = 0
        with_value = {"--name", "--label", "--gpus", "-p", "-v", "-e", "--add-host"}
        while i < len(args) and args[i].startswith("-"):
            arg = args[i]
            if arg in with_value:
                opts.setdefault(arg, []).append(args[i + 1])
                i += 2
            elif "=" in arg and arg.split("=", 1)[0] in {"--ipc", *with_value}:
                key, value = arg.split("=", 1)
                opts.setdefault(key, []).append(value)
                i += 1
            elif arg in {"-d", "--detach", "--rm"}:
                flags.add(arg)
                i += 1
            else:
                sys.stderr.write(f"unknown flag: {arg}\nSee 'docker run --help'.\n")
                return 125
        if "-d" not in flags:
            sys.stderr.write("fake docker: only detached runs (-d) are played\n")
            return 125
        if i >= len(args):
            sys.stderr.write("docker: 'docker run' requires at least 1 argument.\n")
            return 125
        image, cmd = args[i], args[i + 1:]
        name = (opts.get("--name") or [f"fake_{secrets.token_hex(3)}"])[-1]
        clash = self.find(name)
        if clash:
            sys.stderr.write(f'docker: Error response from daemon: Conflict. The container name "/{name}" is '
                             f'already in use by container "{clash.id}". You have to remove (or rename) that '
                             "container to be able to reuse that name.\nSee 'docker run --help'.\n")
            return 125
        ports = {}
        for spec in opts.get("-p", []):
            host_ip, host_port, container_port = spec.rsplit(":", 2)
            ports[f"{container_port}/tcp"] = [{"HostIp": host_ip, "HostPort": host_port}]
        env = {}
        for spec in opts.get("-e", []):
            key, eq, _value = spec.partition("=")
            env[key] = bool(eq) or key in os.environ  # docker reads a bare NAME from its own environment
        labels = dict(spec.partition("=")[::2] for spec in opts.get("--label", []))
        cid = secrets.token_hex(32)
        folder = self.root / cid
        folder.mkdir()
        meta = {"id": cid, "name": name, "image": image, "cmd": cmd, "labels": labels, "env": env,
                "ports": ports, "binds": opts.get("-v", []), "ipc": (opts.get("--ipc") or [""])[-1],
                "gpus": opts.get("--gpus", []), "created": time.time_ns(), "status": "created"}
        write_json(folder / "meta.json", meta)
        (folder / "log.jsonl").write_text("")
        if opts.get("--gpus") and self.config.get("no_gpu_runtime"):
            sys.stderr.write('docker: Error response from daemon: could not select device driver "" with '
                             "capabilities: [[gpu]].\n")
            return 125
        proc = subprocess.Popen([sys.executable, str(HERE), "--container", str(self.state), cid],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, cwd=folder)
        import psutil

        meta.update(status="running", pid=proc.pid, pid_started=psutil.Process(proc.pid).create_time())
        write_json(folder / "meta.json", meta)
        print(cid)
        return 0

    # docker ps --------------------------------------------------------------------------------
    def cmd_ps(self, args: list[str]) -> int:
        show_all = no_trunc = False
        filters: list[tuple[str, str]] = []
        fmt = None
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-a", "--all"):
                show_all = True
            elif arg in ("-q", "--quiet"):
                pass  # IDs only: the only output played
            elif arg == "--no-trunc":
                no_trunc = True
            elif arg == "--filter":
                key, _, value = args[i + 1].partition("=")
                filters.append((key, value))
                i += 1
            elif arg == "--format":
                fmt = args[i + 1]
                i += 1
            else:
                sys.stderr.write(f"unknown flag: {arg}\n")
                return 125
            i += 1
        if fmt not in (None, "{{.ID}}"):
            sys.stderr.write(f"fake docker: ps --format {fmt} is not played\n")
            return 125
        for c in self.containers():
            if not show_all and not c.running:
                continue
            ok = True
            for key, value in filters:
                if key == "name":
                    ok = ok and bool(re.search(value, c.name))
                elif key == "label":
                    k, eq, v = value.partition("=")
                    ok = ok and k in c.meta["labels"] and (not eq or c.meta["labels"][k] == v)
                else:
                    sys.stderr.write(f"fake docker: filter {key} is not played\n")
                    return 125
            if ok:
                print(c.id if no_trunc else c.id[:LABEL_ID])
        return 0

    # docker inspect -------------------------------------------------------------------------------
    def cmd_inspect(self, args: list[str]) -> int:
        fmt = None
        refs = []
        i = 0
        while i < len(args):
            if args[i] in ("-f", "--format"):
                fmt = args[i + 1]
                i += 2
            elif args[i] == "--type":
                i += 2
            else:
                refs.append(args[i])
                i += 1
        rc, found = 0, []
        for ref in refs:
            c = self.find(ref)
            if c is None:
                sys.stderr.write(f"Error: No such object: {ref}\n")
                rc = 1
            else:
                found.append(c)
        for c in found:
            data = c.inspect()
            if fmt is None:
                continue
            if fmt == "{{.State.Running}}":
                print("true" if data["State"]["Running"] else "false")
            elif fmt == "{{.State.Status}}":
                print(data["State"]["Status"])
            elif fmt == "{{.Id}}":
                print(c.id)
            elif fmt == "{{.Image}}":
                print(data["Image"])
            else:
                sys.stderr.write(f"fake docker: inspect format {fmt} is not played\n")
                return 1
        if fmt is None and found:
            print(json.dumps([c.inspect() for c in found], indent=4))
        return rc

    # docker logs ------------------------------------------------------------------------------------
    def cmd_logs(self, args: list[str]) -> int:
        timestamps, since, ref = False, 0, None
        i = 0
        while i < len(args):
            if args[i] in ("-t", "--timestamps"):
                timestamps = True
            elif args[i] == "--since":
                since = parse_since(args[i + 1])
                i += 1
            elif args[i].startswith("-"):
                sys.stderr.write(f"fake docker: logs {args[i]} is not played\n")
                return 125
            else:
                ref = args[i]
            i += 1
        c = self.find(ref or "")
        if c is None:
            sys.stderr.write(f"Error response from daemon: No such container: {ref}\n")
            return 1
        for line in (c.dir / "log.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry["time"] < since:
                continue
            text = (stamp(entry["time"]) + " " if timestamps else "") + entry["log"]
            (sys.stdout if entry["stream"] == "stdout" else sys.stderr).write(text)
        return 0

    # docker rm ----------------------------------------------------------------------------------------
    def cmd_rm(self, args: list[str]) -> int:
        force = any(a in ("-f", "--force") for a in args)
        refs = [a for a in args if not a.startswith("-")]
        failed = False
        for ref in refs:
            c = self.find(ref)
            if c is None:
                sys.stderr.write(f"Error response from daemon: No such container: {ref}\n")
                failed = failed or not force  # `rm -f` of a missing container is not an error
                continue
            if c.running and not force:
                sys.stderr.write(f"Error response from daemon: cannot remove container \"/{c.name}\": container "
                                 "is running: stop the container before removing or force remove\n")
                failed = True
                continue
            c.kill()
            shutil.rmtree(c.dir, ignore_errors=True)
            print(ref)
        return 1 if failed else 0


# -- the "container": the image's `vllm serve` entrypoint, played by the replay server -------------------
def run_container(state: Path, cid: str) -> int:
    folder = state / "containers" / cid
    meta = json.loads((folder / "meta.json").read_text())
    config = json.loads((state / "config.json").read_text())
    lock = threading.Lock()
    last = [0]
    log = open(folder / "log.jsonl", "a", encoding="utf-8")

    def emit(stream: str, text: str) -> None:
        with lock:
            now = max(time.time_ns(), last[0] + 1)
            last[0] = now
            log.write(json.dumps({"stream": stream, "log": text, "time": now}) + "\n")
            log.flush()

    def finish(code: int) -> int:
        (folder / "exit").write_text(str(code))
        return code

    cmd = meta["cmd"]
    model, rest = cmd[0], cmd[1:]

    def arg(flag: str, default: str) -> str:
        return rest[rest.index(flag) + 1] if flag in rest else default

    if error := parse_error(rest):  # the image's entrypoint is `vllm serve`: argparse exits 2 before any banner
        for line in (USAGE + error).splitlines():
            emit("stderr", line + "\n")
        return finish(2)
    emit("stdout", f"INFO vLLM API server version 0.30.0 (stand-in image {meta['image']})\n")
    emit("stderr", f"INFO non-default args: model={model!r}\n")
    mode = config.get("mode", "serve")
    if mode == "fatal":  # as the real image: the engine's failure, then the container exits 1
        engine_failure(lambda line: emit("stderr", line + "\n"))
        return finish(1)
    if mode == "exit":
        emit("stderr", "ValueError: the stand-in container exits at once\n")
        return finish(1)
    if "8000/tcp" not in meta["ports"]:  # not a vLLM unit (a container someone else runs): just live
        emit("stdout", "INFO nothing published: idling\n")
        time.sleep(300)
        return finish(0)
    host_port = meta["ports"]["8000/tcp"][0]["HostPort"]
    engine_started(lambda line: emit("stderr", line + "\n"), arg("--max-model-len", "65536"))
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.replay.server", "--trajectory", config["trajectory"],
         "--host", "127.0.0.1", "--port", host_port, "--served-model-name", arg("--served-model-name", model),
         "--max-model-len", arg("--max-model-len", "65536")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def pump(pipe, stream: str) -> None:
        for line in pipe:
            emit(stream, line)

    threads = [threading.Thread(target=pump, args=(server.stdout, "stdout")),
               threading.Thread(target=pump, args=(server.stderr, "stderr"))]
    for t in threads:
        t.start()
    code = server.wait()
    for t in threads:
        t.join(timeout=5)
    return finish(code)


if __name__ == "__main__" and sys.argv[1:2] == ["--container"]:
    sys.exit(run_container(Path(sys.argv[2]), sys.argv[3]))
