"""The agent's view and privilege, proven from outside before anything is served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.errors import PreflightError
from harness.sandbox.confine import SYSTEM, Sandbox, View, wrap
from harness.sandbox.identity import UID_VAR


# -- the view, proven from outside ---------------------------------------------------------
CREDENTIALS = (".ssh", ".azure", ".aws", ".config", ".local/share/opencode", ".kube", ".docker", ".netrc",
               ".git-credentials", ".gnupg")
_MAX_SIBLINGS = 200  # host entries looked at per folder on the way to a bind
_OWN_MOUNTS = ("/proc", "/dev", "/tmp", "/run")  # the sandbox's own (fresh) mounts, not the host's


def must_stay_hidden(root: Path, run_dir: Path, home: Path) -> dict[str, list[Path]]:
    """What no agent may see, by why: the project root, each mission's key, other runs, the real HOME."""
    runs = run_dir.parent
    others = sorted(p for p in runs.iterdir() if p != run_dir)[:50] if runs.is_dir() else []
    return {
        "the project root": [root],
        "a mission's hidden key": sorted((root / "missions").glob("*/key")),
        "another run": others,
        "the real HOME": [home, *(home / c for c in CREDENTIALS)],
    }


def _exposed_statically(binds: list[Path], hidden: dict[str, list[Path]]) -> list[str]:
    found = []
    for why, paths in hidden.items():
        for path in paths:
            for bind in binds:
                inside_bind = bind == path or bind in path.parents
                bind_inside = why == "a mission's hidden key" and path in bind.parents
                if inside_bind or bind_inside:
                    found.append(f"{why} ({path}) through the bound {bind}")
    return found


def _siblings_of_the_way(binds: list[Path]) -> list[Path]:
    """Host entries in the folders bwrap creates on the way to each bind (/, /work, the
    checkout ...) that lead to no bind: from inside, none of them may exist."""
    on_way = {a for b in binds for a in (b, *b.parents)} | {Path(p) for p in _OWN_MOUNTS}
    out: list[Path] = []
    def shown(path: Path) -> bool:
        return any(b == path or b in path.parents for b in binds)

    for folder in sorted({a for b in binds for a in b.parents}):
        if shown(folder):
            continue  # bound whole: everything in it is meant to be seen
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)[:_MAX_SIBLINGS]
        except OSError:
            continue
        out += [Path(e.path) for e in entries if Path(e.path) not in on_way]
    return out


def prove_view(sandbox: Sandbox, view: View, hidden: dict[str, list[Path]]) -> None:
    """Refuse (PreflightError) unless every hidden path is invisible from inside the sandbox:
    no bind shows it, and looking from inside finds neither it nor anything off the view."""
    if sandbox.kind != "bwrap":
        return  # sandbox-exec: see the README for what is and is not enforced on macOS
    binds = [b.resolve() if b.exists() else b for b in view.binds()] + view.binds()
    fix = ("move the checkout (or the agent's Python, or opencode) out of the system folders the sandbox shows "
           f"({', '.join(SYSTEM)}), or pass --no-sandbox (the run is then marked unsandboxed)")
    if found := _exposed_statically(binds, hidden):
        raise PreflightError(f"the sandbox would show {'; '.join(list(dict.fromkeys(found))[:5])}",
                             field="sandbox", fix=fix)
    # A folder on the way to a bind exists inside as an empty skeleton: its other entries are looked for.
    on_way = {a for b in view.binds() for a in b.parents}
    looked = [*(p for paths in hidden.values() for p in paths if p not in on_way), *_siblings_of_the_way(view.binds())]
    script = 'for p do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done'
    argv = wrap(sandbox, ["/bin/sh", "-c", script, "sh", *map(str, looked)], view, view.writable[0], view.writable[0])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    seen = [line for line in done.stdout.splitlines() if line]
    if done.returncode != 0 or seen:
        what = f"it shows {', '.join(seen[:8])}" if seen else f"the check failed: {done.stderr.strip()[:200]}"
        raise PreflightError(f"the agent's sandbox is not tight: {what}", field="sandbox", fix=fix)




# -- privilege, proven from inside ---------------------------------------------------------
PRIVCHECK = Path(__file__).resolve().with_name("privcheck.py")


def privilege_probes(sandbox: Sandbox, view: View, probe_dir: Path) -> dict[str, str]:
    """What privcheck.py met inside the sandbox of `view` (probe_dir: a writable folder of
    the view, already the agent user's; the harness package is the read-only folder tried)."""
    readonly = str(PRIVCHECK.parent)
    argv = wrap(sandbox, [os.path.realpath(sys.executable), "-I", str(PRIVCHECK), str(probe_dir), readonly],
                view, probe_dir, probe_dir)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"sandbox": f"error: the probe did not run (exit {done.returncode}): {done.stderr.strip()[:300]}"}
    return found if isinstance(found, dict) else {"sandbox": "error: the probe printed no result"}


def prove_unprivileged(sandbox: Sandbox, view: View, probe_dir: Path) -> dict[str, str]:
    """Refuse (PreflightError) unless every privileged call the agent could make is refused
    inside its sandbox; the probes' results otherwise (for the record)."""
    if sandbox.kind != "bwrap":
        return {}
    found = privilege_probes(sandbox, view, probe_dir)
    held = {k: v for k, v in found.items() if not v.startswith("refused")}
    if held:
        what = "; ".join(f"{k}: {v}" for k, v in held.items())
        who = view.who
        raise PreflightError(
            f"the agent's sandbox is privileged or could not be checked ({what})", field="sandbox",
            fix=("the harness runs the agent as uid " f"{who.uid} in a user namespace of its own: "
                 "let unprivileged users create user namespaces (sysctl user.max_user_namespaces > 0; "
                 "kernel.unprivileged_userns_clone=1 on Debian kernels; "
                 "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04), make every folder on the "
                 "way to the checkout, its .venv and node_modules searchable by that user (chmod o+x), "
                 f"or set {UID_VAR} to a user that can; or pass --no-sandbox (the run is then marked "
                 "unsandboxed)"))
    return found
