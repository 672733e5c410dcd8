"""The agent's confinement.

- confine.py: the bwrap / sandbox-exec argv over the agent's view (what it sees);
- identity.py: the unprivileged host user it runs as, and the folders handed to it;
- limits.py: processes, disk, /tmp and memory caps, and what was hit;
- enter.py / inside.py: the stdlib shims run just before bwrap (cgroup, drop root) and
  just inside it (rlimits, the network forwarders, the seccomp filter);
- net.py: its own network namespace and the host-side bridge (with the model wire log);
- wirelog.py: the model requests and responses the harness itself saw, and the run's figures;
- proof.py: the view and the lack of privilege, proven from outside before anything bills;
- privcheck.py: the privileged calls tried from inside (preflight and the escape tests);
- denials.py: what the sandbox refused, from the run's own events and the caps' counters;
- untrusted.py: reading agent-written files without following links;
- secrets.py: the unit's key scrubbed from everything a run leaves, in every form;
- sqlitebytes.py: an SQLite file scrubbed by its bytes, never opened by SQLite.
"""
