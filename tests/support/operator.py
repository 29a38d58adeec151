"""Run `ordo operator` as a subprocess against the test control plane, and poll Tasks."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.support.credentials import opted_in

from ordo_devcluster import ControlPlane
from ordo_devcluster.processes import terminate_group

TERMINAL = ("Succeeded", "Failed", "Cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keyring_file(directory: Path, name: str) -> Path:
    """A checkpoint keyring file (one new key), made once per directory and name."""
    path = directory / f"checkpoint-keyring-{name}"
    if not path.exists():
        path.write_text(base64.b64encode(os.urandom(32)).decode() + "\n")
    return path


class OperatorProcess:
    """`ordo operator -n NS` in a subprocess; logs go to a file the test can read.

    ``kubeconfig`` makes the operator authenticate with that kubeconfig instead of the admin
    one (e.g. ``control_plane.service_account_kubeconfig(...)``, so RBAC applies).
    ``scope`` replaces ``-n NS`` (e.g. ``["--all-namespaces"]`` or the flags of a rendered
    Deployment); ``namespace`` then only names the log file.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        namespace: str,
        log_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        scope: Sequence[str] | None = None,
        checkpoint_key: bool = True,
    ) -> None:
        self.cp = control_plane
        self.namespace = namespace
        self.args = list(args)
        self.scope = ["-n", namespace] if scope is None else list(scope)
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"operator-{namespace}.log"
        self.env = control_plane.env(env or os.environ)
        if kubeconfig is not None:
            self.env["KUBECONFIG"] = str(kubeconfig)
        explicit = any(a.startswith("--checkpoint-key-file") for a in [*self.args, *self.scope])
        if checkpoint_key and not explicit:  # False: an older ordo without the flag
            # The keyring the chart would mount: one per log directory and namespace, so a
            # restarted (or second) operator of the same test opens what the first sealed.
            self.args += ["--checkpoint-key-file", str(keyring_file(log_dir, namespace))]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._kills = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        log = self.log_path.open("ab")
        cmd = [
            sys.executable,
            "-m",
            "ordo.cli.main",
            "operator",
            *self.scope,
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--resync-seconds",
            "5",
            # Tests that expect a *NotFound reason should not wait the default 60 s for the
            # reference to appear; a test of the wait sets the annotation on its Task.
            "--reference-grace",
            "2s",
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"operator exited with {self.proc.returncode}:\n{self.logs()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/readyz", timeout=1
                ) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator not ready in 30s:\n{self.logs()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            terminate_group(self.proc, 15)  # SIGTERM, then SIGKILL after 15 s
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the control process: it cleans nothing up. Its worker children (--workers)
        die with it (PR_SET_PDEATHSIG), but one may first see its stdin end and stop its runs
        as at a shutdown (flush, release the Task's lease): see `kill_all` for a node's death."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def kill_all(self) -> None:
        """SIGKILL the control process and its workers at once (its process group), as when
        its node dies: once this returns, no process of this operator writes anything more
        (a request already on the wire may still land)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: it leads its group
        self.proc.wait()
        self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def kills(self) -> int:
        """How many times `kill_and_restart` killed this operator."""
        return self._kills

    def kill_and_restart(self) -> None:
        """SIGKILL the running operator (it must be running: a crash would be a finding),
        write a marker line into its log, and start a new one (waits until it is ready)."""
        if not self.alive:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(
                f"the operator was not running before kill #{self._kills + 1} "
                f"(exit status {code}):\n{self.logs()[-3000:]}"
            )
        self.kill()
        self._kills += 1
        with self.log_path.open("a") as log:
            log.write(json.dumps({"msg": "test: SIGKILL", "kill": self._kills}) + "\n")
        self.start()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines of every start of this operator (other lines skipped)."""
        records: list[dict[str, Any]] = []
        for line in self.logs().splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records

    def task_log(self, name: str, limit: int = 12) -> list[str]:
        """The last `limit` log lines about Task `name` (JSON field `task`), plus the
        restart markers, compacted to one short line each: for failure messages."""
        out: list[str] = []
        for record in self.log_records():
            if record.get("task") == name or str(record.get("msg", "")).startswith("test:"):
                fields = {
                    k: v
                    for k, v in record.items()
                    if k not in ("namespace", "task", "logger", "agent")
                }
                out.append(json.dumps(fields, default=str)[:300])
        while out and str(out[-1]).find("test: SIGKILL") != -1:
            out.pop()
        return out[-limit:]

    def warnings(self, limit: int = 20) -> list[str]:
        """The last `limit` warning/error log lines (message, error type, API status)."""
        out = []
        for record in self.log_records():
            if record.get("level") in ("warning", "error", "critical"):
                keys = ("time", "level", "msg", "task", "error", "errorStatus", "errorReason")
                out.append(json.dumps({k: record[k] for k in keys if k in record})[:300])
        return out[-limit:]

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())


def get_json(cp: ControlPlane, *args: str) -> Any:
    return json.loads(cp.kubectl("get", *args, "-o", "json").stdout)


def doc(kind: str, name: str, spec: dict[str, Any]) -> str:
    """An ordo object of `kind` as JSON, for `kubectl apply -f -` in the Task's namespace."""
    return json.dumps(
        {"apiVersion": "ordo.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    )


def ready_condition(cp: ControlPlane, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    """The object's `Ready` condition as it is now, or None (none yet)."""
    body = get_json(cp, kind, name, "-n", ns)
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return dict(condition)
    return None


def tasks(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cp, "tasks", "-n", namespace)["items"]
    return items


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.25,
    what: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def wait_ready(
    cp: ControlPlane, ns: str, kind: str, name: str, status: str, timeout: float = 30
) -> dict[str, Any]:
    """The object's `Ready` condition once its status is `status` (`True` or `False`)."""
    result: dict[str, Any] = wait_for(
        lambda: (c := ready_condition(cp, ns, kind, name)) and c["status"] == status and c,
        timeout,
        what=f"{kind}/{name} Ready={status}",
    )
    return result


def wait_task(
    cp: ControlPlane,
    namespace: str,
    name: str,
    phases: Iterable[str] = TERMINAL,
    timeout: float = 60,
) -> dict[str, Any]:
    wanted = tuple(phases)

    def check() -> dict[str, Any] | None:
        body: dict[str, Any] = get_json(cp, "task", name, "-n", namespace)
        return body if (body.get("status") or {}).get("phase") in wanted else None

    result: dict[str, Any] = wait_for(check, timeout, what=f"Task {name} to reach {wanted}")
    return result


def apply(cp: ControlPlane, namespace: str, manifest: str | Path) -> None:
    if isinstance(manifest, Path):
        cp.kubectl("apply", "-n", namespace, "-f", str(manifest))
    else:
        cp.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)


def events(cp: ControlPlane, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cp, "events", "-n", namespace)["items"]
    return [e for e in items if name is None or e["involvedObject"].get("name") == name]


# -- exactly-once workload: non-idempotent side effects and the invariants they must keep ----

EFFECT_TOOLS = ("place-order", "send-invoice")
"""The two non-idempotent http Tools every workload Task calls, one per step, in order."""


def effect_model(delay: float = 0.0) -> Any:
    """A stateless scripted OpenAI model for the workload. For a Task whose input is
    `task=<name>`, it calls each still-offered effect tool once, one per step, with arguments
    `{"task": name, "call": "<name>/<tool>"}`, then answers `done <name>`. Stateless (it
    reads the history it is sent), so a resumed or restarted run gets the same answers."""
    from .openai_server import OpenAIServer

    class EffectModel(OpenAIServer):
        def auto_step(self, body: dict[str, Any]) -> dict[str, Any]:
            user = self.user_text(body)
            task = user.split("task=", 1)[1].split()[0] if "task=" in user else "unknown"
            called = {
                c.get("function", {}).get("name")
                for m in body.get("messages", [])
                if isinstance(m, dict) and m.get("role") == "assistant"
                for c in m.get("tool_calls") or []
            }
            offered = [
                t["function"]["name"]
                for t in body.get("tools") or []
                if t.get("type") == "function"
            ]
            fresh = [name for name in EFFECT_TOOLS if name in offered and name not in called]
            if fresh:
                name = fresh[0]
                return {
                    "tool_calls": [
                        {
                            "name": name,
                            "id": f"call_{task}_{name}".replace("-", "_"),
                            "arguments": {"task": task, "call": f"{task}/{name}"},
                        }
                    ]
                }
            return {"text": f"done {task}"}

    return EffectModel(None, fallback={"auto": True, "delay": delay})


def effect_manifests(model_url: str, tool_url: str, *, tool_delay: float, timeout: str) -> str:
    """Secret, ModelEndpoint `model`, the two effect Tools and Agent `agent`, as one stream."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": opted_in({"name": "model-key"}),
            "stringData": {"api-key": "sk-test-effects"},
        },
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "model"},
            "spec": {
                "provider": "openai-compatible",
                "baseUrl": model_url + "/v1",
                "model": "gpt-test",
                "credentials": {"secretRef": {"name": "model-key", "key": "api-key"}},
                "retry": {"maxAttempts": 2, "backoff": "100ms"},
            },
        },
    ]
    for name in EFFECT_TOOLS:
        docs.append(
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "Tool",
                "metadata": {"name": name},
                "spec": {
                    "type": "http",
                    "description": f"{name}: a side effect that must not run twice",
                    "inputSchema": {
                        "type": "object",
                        "properties": {"task": {"type": "string"}, "call": {"type": "string"}},
                        "required": ["task", "call"],
                    },
                    "http": {"url": f"{tool_url}/effect?delay={tool_delay:g}"},
                    "idempotent": False,
                    "timeout": "30s",
                },
            }
        )
    docs.append(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "agent"},
            "spec": {
                "modelRef": "model",
                "prompt": "You place orders and send invoices.",
                "tools": list(EFFECT_TOOLS),
                "limits": {"maxSteps": 2 * len(EFFECT_TOOLS) + 2, "timeout": timeout},
            },
        }
    )
    return "\n---\n".join(json.dumps(d) for d in docs)


def effect_tasks(names: Iterable[str]) -> str:
    return "\n---\n".join(
        json.dumps(
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "Task",
                "metadata": {"name": name},
                "spec": {"agentRef": "agent", "input": f"task={name}"},
            }
        )
        for name in names
    )


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    from datetime import UTC, datetime

    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


class TaskTrack:
    """What the monitor saw of one Task (wall-clock seconds, `time.time()`)."""

    def __init__(self, name: str, uid: str, now: float) -> None:
        self.name = name
        self.uid = uid
        self.first_seen = now
        self.first_running: float | None = None
        self.terminal_at: float | None = None
        self.status: dict[str, Any] = {}
        self.phases: list[str] = []
        """Distinct consecutive phases observed."""
        self.execution_ids: list[str] = []
        self.orphan_since: float | None = None
        self.max_orphan = 0.0
        self.orphan_note = ""


class InvariantMonitor:
    """Polls the Tasks (and their execution leases, `status.lease`) of a namespace straight from the apiserver (as
    admin, never through a fault proxy) from a background thread, and checks afterwards:

    * every Task reaches a terminal phase, within `run_bound(track)` seconds of first being
      seen `Running`, with a documented reason;
    * a terminal Task never changes phase again;
    * no Task stays `Running` without a live execution lease (missing, or expired more than
      `orphan_bound` seconds ago);
    * every non-idempotent call ran at most once (`effects`), and a `Succeeded` Task ran each
      of its calls exactly once.
    """

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        *,
        lease_seconds: float,
        orphan_bound: float,
        interval: float = 0.5,
    ) -> None:
        import threading

        self.cp = cp
        self.namespace = namespace
        self.lease_seconds = lease_seconds
        self.orphan_bound = orphan_bound
        self.interval = interval
        self.tracks: dict[str, TaskTrack] = {}
        self.polls = 0
        self.poll_errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="invariant-monitor", daemon=True)

    def _get(self, path: str) -> list[dict[str, Any]]:
        status, body = self.cp.request(path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status}")
        items: list[dict[str, Any]] = json.loads(body)["items"]
        return items

    def poll(self) -> None:
        tasks = self._get(f"/apis/ordo.dev/v1alpha1/namespaces/{self.namespace}/tasks")
        now = time.time()
        with self._lock:
            self.polls += 1
            for body in tasks:
                meta = body["metadata"]
                track = self.tracks.get(meta["name"])
                if track is None:
                    track = self.tracks[meta["name"]] = TaskTrack(meta["name"], meta["uid"], now)
                status = body.get("status") or {}
                track.status = status
                phase = status.get("phase") or "Pending"
                if not track.phases or track.phases[-1] != phase:
                    track.phases.append(phase)
                execution = status.get("executionId")
                if execution and execution not in track.execution_ids:
                    track.execution_ids.append(execution)
                if phase in TERMINAL:
                    if track.terminal_at is None:
                        track.terminal_at = now
                    track.orphan_since = None
                    continue
                if phase != "Running":
                    continue
                if track.first_running is None:
                    track.first_running = now
                lease = status.get("lease")
                spec = lease if isinstance(lease, dict) else {}
                renewed = _parse_time(spec.get("renewTime"))
                if lease is None or renewed is None:
                    # No lease at all: count from when we first saw it missing, plus the
                    # lease duration (a holder may be between takeover steps).
                    since = now + self.lease_seconds if track.orphan_since is None else None
                    note = "no execution lease"
                else:
                    expiry = renewed + float(spec.get("durationSeconds", 0))
                    since = expiry if expiry < now else None
                    note = f"lease of {spec.get('holder')} expired or released"
                    if since is None:
                        track.orphan_since = None
                if since is not None and track.orphan_since is None:
                    track.orphan_since = since
                if track.orphan_since is not None:
                    orphan = now - track.orphan_since
                    if orphan > track.max_orphan:
                        track.max_orphan = orphan
                        track.orphan_note = note

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:
                with self._lock:
                    self.poll_errors += 1
            self._stop.wait(self.interval)

    def start(self) -> InvariantMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def all_terminal(self, expected: int) -> bool:
        with self._lock:
            return len(self.tracks) >= expected and all(
                t.terminal_at is not None for t in self.tracks.values()
            )

    def wait_all_terminal(self, expected: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.all_terminal(expected):
                return True
            time.sleep(self.interval)
        return self.all_terminal(expected)

    def violations(
        self,
        expected: Iterable[str],
        effects: Counter[tuple[str, str]],
        run_bound: Callable[[TaskTrack], float],
    ) -> list[tuple[str, str]]:
        """(Task name, what broke) for every broken invariant."""
        from typing import get_args

        from ordo.api.task import Reason

        documented = set(get_args(Reason))
        out: list[tuple[str, str]] = []
        names = set(expected)
        with self._lock:
            tracks = dict(self.tracks)
        for name in sorted(names):
            track = tracks.get(name)
            if track is None:
                out.append((name, "lost: never seen by the monitor"))
                continue
            phase, reason = track.status.get("phase"), track.status.get("reason")
            if track.terminal_at is None:
                out.append(
                    (
                        name,
                        f"stuck: not terminal at the end (phase {phase}, phases seen "
                        f"{track.phases}, executions {len(track.execution_ids)})",
                    )
                )
            else:
                terminal_phases = [p for p in track.phases if p in TERMINAL]
                if len(track.phases) > track.phases.index(terminal_phases[0]) + 1:
                    out.append((name, f"terminal phase changed: phases seen {track.phases}"))
                if reason not in documented:
                    out.append((name, f"terminal with an undocumented reason {reason!r}"))
                if track.first_running is not None:
                    took = track.terminal_at - track.first_running
                    bound = run_bound(track)
                    if took > bound:
                        out.append(
                            (
                                name,
                                f"slow: terminal {took:.1f}s after it was first seen Running "
                                f"(bound {bound:.1f}s; ended {phase}/{reason})",
                            )
                        )
            if track.max_orphan > self.orphan_bound:
                out.append(
                    (
                        name,
                        f"Running without a live lease holder for {track.max_orphan:.1f}s "
                        f"(bound {self.orphan_bound:g}s: {track.orphan_note}; "
                        f"now {phase}/{reason})",
                    )
                )
            for tool in EFFECT_TOOLS:
                runs = effects.get((name, f"{name}/{tool}"), 0)
                if runs > 1:
                    out.append((name, f"repeated side effect: {tool} executed {runs} times"))
                elif phase == "Succeeded" and runs != 1:
                    out.append(
                        (name, f"Succeeded, but {tool} executed {runs} times (exactly 1 expected)")
                    )
        for task, call in sorted(effects):
            if task not in names:
                out.append((task, f"side effect {call!r} for a Task this test never created"))
        return out

    def summary(self, effects: Counter[tuple[str, str]], expected: Iterable[str]) -> dict[str, Any]:
        names = set(expected)
        with self._lock:
            tracks = dict(self.tracks)
        terminal: Counter[str] = Counter()
        for name in names:
            track = tracks.get(name)
            if track is not None and track.terminal_at is not None:
                terminal[f"{track.status.get('phase')}/{track.status.get('reason')}"] += 1
        return {
            "tasks": len(names),
            "terminal": dict(sorted(terminal.items())),
            "lost": sum(1 for n in names if n not in tracks or tracks[n].terminal_at is None),
            "sideEffects": sum(effects.values()),
            "repeatedSideEffects": sum(n - 1 for n in effects.values() if n > 1),
            "resumedTasks": sum(1 for t in tracks.values() if len(t.execution_ids) > 1),
            "maxOrphanSeconds": round(max((t.max_orphan for t in tracks.values()), default=0), 1),
            "monitorPolls": self.polls,
            "monitorPollErrors": self.poll_errors,
        }

    def dump(self, effects: Counter[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
        """What the monitor saw of every Task (with the executions of its calls), for the
        test's report directory."""
        effects = effects or Counter()
        with self._lock:
            tracks = sorted(self.tracks.values(), key=lambda t: t.name)
            return [
                {
                    "name": t.name,
                    "uid": t.uid,
                    "phase": t.status.get("phase"),
                    "reason": t.status.get("reason"),
                    "message": t.status.get("message"),
                    "phases": t.phases,
                    "executions": t.execution_ids,
                    "firstSeen": round(t.first_seen, 3),
                    "firstRunning": t.first_running and round(t.first_running, 3),
                    "terminalAt": t.terminal_at and round(t.terminal_at, 3),
                    "maxOrphanSeconds": round(t.max_orphan, 1),
                    "effects": {
                        call: n for (task, call), n in sorted(effects.items()) if task == t.name
                    },
                }
                for t in tracks
            ]

    def explain(
        self,
        title: str,
        broken: list[tuple[str, str]],
        op: OperatorProcess,
        extra: Callable[[TaskTrack], list[str]] | None = None,
        limit: int = 8,
    ) -> str:
        """A failure message: every violation, then for the first `limit` broken Tasks their
        status, phases, executions, `extra(track)` lines and operator log lines."""
        lines = [f"{len(broken)} invariant violation(s) {title}:"]
        lines += [f"  {name}: {what}" for name, what in broken]
        for shown, name in enumerate(dict.fromkeys(name for name, _ in broken)):
            if shown == limit:
                lines.append(f"(details of the first {limit} Tasks only)")
                break
            track = self.tracks.get(name)
            lines.append(f"--- {name}")
            if track is not None:
                keys = ("phase", "reason", "message", "step", "executionId")
                status = {k: track.status.get(k) for k in keys}
                lines.append(f"  status: {json.dumps(status)}")
                lines.append(f"  phases seen: {track.phases}; executions: {track.execution_ids}")
                lines += [f"  {line}" for line in (extra(track) if extra else [])]
            lines += [f"  log: {line}" for line in op.task_log(name)]
        lines.append("--- operator warnings/errors (last 20)")
        lines += [f"  {line}" for line in op.warnings()]
        return "\n".join(lines)


def write_report(
    directory: Path,
    test: str,
    summary: dict[str, Any],
    monitor: InvariantMonitor,
    failure: str,
    effects: Counter[tuple[str, str]] | None = None,
) -> Path:
    """Print the one-line summary; write it (`<test>-summary.json`), the per-Task record
    (`<test>-tasks.json`) and the failure message (`<test>-violations.txt`) to `directory`."""
    path = directory / f"{test}-summary.json"
    path.write_text(json.dumps(summary, indent=2))
    (directory / f"{test}-tasks.json").write_text(json.dumps(monitor.dump(effects), indent=1))
    if failure:
        (directory / f"{test}-violations.txt").write_text(failure)
    print(f"\n{test.upper()} SUMMARY {json.dumps(summary)}\n(written to {path})")
    return path
