"""Synthetic fleet (``apex bench fleet``): the largest fleet of actors that S shards and a
real learner sustain at the Ape-X paper's per-actor rate.

A logical actor (``bench.system.fleet_worker``) is an insert client of its own (its sockets,
credit and lanes) that replays transitions recorded from real episodes of the env
(random actions) at ``PAPER_RATE`` transitions/s: about 139 env frames/s with action
repeat 4. No envs step and no network acts, so the figures are the replay's and the
learner's cost alone. For each fleet size, fresh shards take the fleet's actors; once all
of them send, a real learner starts (``apex learner``, no rate limiter, so it samples as
fast as it trains) and the window runs; the fleet then waits for every batch to be
confirmed.

On a machine of two or more cores the learner has a core of its own (CPU affinity) and the
shards and the fleet share the others: the fleet's own CPU would otherwise starve the
learner, which on a cluster runs elsewhere. Figures include the CPU each role used over
the window (the unit costs ``apex bench model`` reads).

A fleet size is *sustained* when the fleet sent at least ``RATE_SHARE`` of its target
rate, no shard rejected a message, every transition sent is held by a shard (none lost,
none unconfirmed), and the learner kept at least ``LEARNER_SHARE`` of its update rate
with the smallest fleet measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import zmq

from apex.learning.metrics import read_metrics
from bench.report import ok_record
from bench.system.namespace_hosts import HOSTS, namespace_hosts
from bench.system.recordings import record
from bench.workers import REPO_ROOT, worker_env
from launch import builder
from launch.config import resolve, write_resolved
from launch.local.ports import free_ports
from launch.supervision.processes import cpu_seconds, softirq_seconds
from replay.protocol.requests import RequestClient

SUITE = "fleet"
PAPER_RATE = 35.0
RATE_SHARE = 0.95
LEARNER_SHARE = 0.9
ACTORS_PER_WORKER = 128
FLEET_NICE = 10
RECORDED = {"CartPole-v1": 20_000, "Pong": 600}
CAPACITY = {"CartPole-v1": 1_000_000, "Pong": 20_000}
START_TIMEOUT_S = 180.0
_ALL_CORES = sorted(os.sched_getaffinity(0))
LEARNER_CORES = set(_ALL_CORES[:1])
OTHER_CORES = set(_ALL_CORES[1:] or _ALL_CORES)
UNITS = {
    "target_per_s": "transitions/s",
    "sent_per_s": "transitions/s",
    "transitions_lost": "transitions",
    "unconfirmed": "transitions",
    "rejected": "messages",
    "no_room": "sends",
    "late_p99_s": "s",
    "learner_updates_per_s": "updates/s",
    "sustained": "bool",
    "workers_failed": "processes",
    "fleet_cpu_cores": "cores",
    "shard_cpu_cores": "cores",
    "learner_cpu_cores": "cores",
    "softirq_cores": "cores",
    "messages_per_s": "messages/s",
}


class FleetRun:
    """Shards and a learner in ``run_dir``, their ports from this machine."""

    def __init__(
        self,
        run_dir: Path,
        env_name: str,
        shards: int,
        frames: bool = False,
        envs: int = 1,
        hosts: bool = False,
    ) -> None:
        self.hosts = hosts
        config = resolve(
            {
                "env": env_name,
                "shards": shards,
                "actors": 1,
                "actor": {"envs_per_actor": envs},
                "replay": {
                    "capacity": CAPACITY[env_name],
                    "min_size": 2_000,
                    "samples_per_insert": None,
                    "frames": frames,
                    "snapshot_interval_s": 0,
                },
                "learner": {
                    "eval_every_steps": 0,
                    "metrics_interval_s": 1.0,
                    "checkpoint_interval_s": 1e12,
                    "target_return": 1e12,
                },
                # The namespace hosts sit on a private bridge; the fleet measures the
                # transport without CURVE (its cost is apex bench shard --curve's).
                "security": {"insecure": hosts},
            }
        )
        self.run_dir = run_dir
        self.config_path = config_path = write_resolved(config, run_dir)
        self.spec = builder.transition_spec(config)
        builder.write_spec(run_dir, self.spec)
        ports = free_ports("127.0.0.1", 2 * shards)
        address = self.address("shard")
        self.endpoints = [
            [f"tcp://{address}:{ports[2 * i]}", f"tcp://{address}:{ports[2 * i + 1]}"]
            for i in range(shards)
        ]
        launch = [sys.executable, "-m", "launch"]
        self.processes = [
            self._start(
                f"shard-{i}",
                [
                    *launch,
                    "replay",
                    "--config",
                    str(config_path),
                    "--run-dir",
                    str(run_dir),
                    "--shard-index",
                    str(i),
                    "--insert-port",
                    str(ports[2 * i]),
                    "--request-port",
                    str(ports[2 * i + 1]),
                    "--host",
                    address,
                ],
            )
            for i in range(shards)
        ]
        self._learner_command = [
            *launch,
            "learner",
            "--config",
            str(config_path),
            "--run-dir",
            str(run_dir),
            "--host",
            self.address("learner"),
        ]
        for pair in self.endpoints:
            self._learner_command += ["--shard", ",".join(pair)]

    def start_learner(self) -> None:
        """Started once the fleet sends: its clients' start must not wait behind the
        learner's samples on the shards' core."""
        self.processes.append(self._start("learner", self._learner_command))

    def wait_for_training(self, timeout_s: float) -> None:
        """Until the learner's first progress record with updates (or ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not any(
            record.get("event") == "progress" and record.get("updates")
            for record in read_metrics(self.run_dir)
        ):
            if self.processes[-1].poll() is not None:
                return  # the learner died: the figures will show it
            time.sleep(0.2)

    def address(self, role: str) -> str:
        """Where ``role`` binds: its namespace host's address, or loopback."""
        return HOSTS[role] if self.hosts else "127.0.0.1"

    def on_host(self, role: str, command: list[str]) -> list[str]:
        """``command`` run on ``role``'s namespace host (``ip netns exec`` execs it, so the
        process keeps its pid), or here."""
        return ["ip", "netns", "exec", role, *command] if self.hosts else command

    def spawn(self, role: str, command: list[str], cores: set[int], **streams) -> subprocess.Popen:
        """``command`` on ``role``'s host, pinned to ``cores`` (set while it still imports:
        the threads it starts later inherit them)."""
        process = subprocess.Popen(
            self.on_host(role, command), cwd=REPO_ROOT, env=worker_env(), **streams
        )
        os.sched_setaffinity(process.pid, cores)
        return process

    def _start(self, name: str, command: list[str]) -> subprocess.Popen:
        role = "learner" if name == "learner" else "shard"
        cores = LEARNER_CORES if name == "learner" else OTHER_CORES
        with open(self.run_dir / f"{name}.log", "wb") as log:
            return self.spawn(role, command, cores, stdout=subprocess.DEVNULL, stderr=log)

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: the shards together, the learner, and the machine's soft
        interrupts (the network stack's receive work, not charged to any process)."""
        seconds = [cpu_seconds(process.pid) or 0.0 for process in self.processes]
        return {"shards": sum(seconds[:-1]), "learner": seconds[-1], "softirq": softirq_seconds()}

    def infos(self) -> list[dict]:
        context = zmq.Context()
        try:
            clients = [
                RequestClient(context, request, sender=999_999, timeout_s=30)
                for _, request in self.endpoints
            ]
            answers = [client.info() for client in clients]
            for client in clients:
                client.close()
            return answers
        finally:
            context.destroy(linger=0)

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def start_worker(
    run: FleetRun, recording: Path, first: int, actors: int, seconds: float
) -> subprocess.Popen:
    """A process of ``actors`` logical actors (senders ``first``, ...) into ``run``'s shards;
    its first line says they send, its last what they did (``bench.system.fleet_worker``)."""
    params = {
        "shards": run.endpoints,
        "recording": str(recording),
        "spec": {k: [list(s), d] for k, (s, d) in run.spec.to_dict().items()},
        "first_sender": first,
        "start_timeout_s": 900.0,
        "actors": actors,
        "rate": PAPER_RATE,
        "batch": 50,
        "seconds": seconds,
    }
    command = [sys.executable, "-m", "bench.system.fleet_worker", json.dumps(params)]
    with open(run.run_dir / f"fleet-{first}.log", "wb") as log:
        worker = run.spawn(
            "actor", command, OTHER_CORES, stdout=subprocess.PIPE, stderr=log, text=True
        )
    # The fleet stands in for actors on other machines: on the shards' core it yields to
    # them, so what it costs does not come out of the replay's service.
    os.setpriority(os.PRIO_PROCESS, worker.pid, FLEET_NICE)
    return worker


def _why_failed(run: FleetRun, worker: subprocess.Popen, lines: list[str]) -> str:
    """What a fleet worker that gave no report left: its exit status, what it printed
    after the window, and the end of its log."""
    first = json.loads(worker.args[-1])["first_sender"]
    log = (run.run_dir / f"fleet-{first}.log").read_text(errors="replace").strip()
    tail = " | ".join(log.splitlines()[-3:]) or "(empty log)"
    return f"worker of senders {first}+: exit {worker.returncode}, {len(lines)} lines; {tail}"


def _measure(
    env_name: str, recording: Path, actors: int, shards: int, seconds: float, hosts: bool
) -> dict:
    with tempfile.TemporaryDirectory(prefix="apex-fleet-") as directory:
        run = FleetRun(Path(directory), env_name, shards, hosts=hosts)
        try:
            workers = [
                start_worker(run, recording, first, min(ACTORS_PER_WORKER, actors - first), seconds)
                for first in range(0, actors, ACTORS_PER_WORKER)
            ]
            for worker in workers:  # each says when its actors start sending
                worker.stdout.readline()
            run.start_learner()
            run.wait_for_training(START_TIMEOUT_S)
            # The CPU window: the learner trains and the fleet sends (not its flush).
            cpu_before, window_start = run.cpu(), time.monotonic()
            for worker in workers:  # each says when its actors stop sending
                worker.stdout.readline()
            cpu_after, window_s = run.cpu(), time.monotonic() - window_start
            reports, failed = [], []
            for worker in workers:
                out, _ = worker.communicate(timeout=START_TIMEOUT_S + seconds + 120)
                lines = out.strip().splitlines()
                if worker.returncode != 0 or not lines:  # e.g. no start answer in time
                    failed.append(_why_failed(run, worker, lines))
                    continue
                reports.append(json.loads(lines[-1]))
            infos = run.infos()
            progress = [r for r in read_metrics(run.run_dir) if r.get("event") == "progress"]
        finally:
            run.stop()
    if failed:
        return {
            "target_per_s": actors * PAPER_RATE,
            "workers_failed": len(failed),
            "failures": failed,
        }
    sent = sum(r["transitions_sent"] for r in reports)
    received = sum(
        s["transitions"]
        for info in infos
        for key, s in info["senders"].items()
        if int(key) < actors
    )
    # The learner's rate once it trains: from its third progress record with updates.
    training = [r["updates_per_s"] for r in progress if r.get("updates")]
    # A learner that started late (a loaded machine, a short --quick window) has fewer:
    # its rate while the fleet sent is still measured, warm-up and all.
    window = [rate for rate in training[2:] if rate] or [rate for rate in training if rate]
    return {
        "target_per_s": actors * PAPER_RATE,
        "sent_per_s": sent / max(r["seconds"] for r in reports),
        "transitions_lost": sent - received,
        "unconfirmed": sum(r["unconfirmed_after_flush"] for r in reports),
        "rejected": sum(info["rejected_total"] for info in infos),
        "no_room": sum(r["no_room"] for r in reports),
        "late_p99_s": max(r["late_p99_s"] for r in reports),
        # None: too few progress records in the window to say (a loaded machine).
        "learner_updates_per_s": float(np.median(window)) if window else None,
        "fleet_cpu_cores": sum(r["cpu_s"] for r in reports) / max(r["seconds"] for r in reports),
        "shard_cpu_cores": (cpu_after["shards"] - cpu_before["shards"]) / window_s,
        "learner_cpu_cores": (cpu_after["learner"] - cpu_before["learner"]) / window_s,
        "softirq_cores": (cpu_after["softirq"] - cpu_before["softirq"]) / window_s,
        "messages_per_s": sum(r["messages_sent"] for r in reports)
        / max(r["seconds"] for r in reports),
    }


def run(
    quick: bool = False,
    env_name: str = "CartPole-v1",
    fleet_sizes: Sequence[int] = (),
    shards: int = 4,
    seconds: float | None = None,
    progress: Callable[[str], None] = print,
    hosts: bool = False,
) -> dict:
    """``hosts``: shards, learner and fleet on the namespace hosts (root)."""
    sizes = tuple(fleet_sizes) or ((16, 64) if quick else (64, 256, 1024, 2048))
    seconds = seconds or (12.0 if quick else 40.0)
    records, baseline, largest = [], None, 0
    on_hosts = namespace_hosts() if hosts else contextlib.nullcontext()
    with on_hosts, tempfile.TemporaryDirectory(prefix="apex-fleet-recording-") as directory:
        recording = record(
            env_name, RECORDED[env_name] // (10 if quick else 1), Path(directory) / "recording.npz"
        )
        for actors in sizes:
            progress(f"fleet {actors} actors into {shards} shards")
            figures = _measure(env_name, recording, actors, shards, seconds, hosts)
            failures = figures.pop("failures", [])
            for failure in failures:
                progress(f"fleet {actors}: {failure}")
            baseline = baseline or figures.get("learner_updates_per_s")
            sustained = not figures.get("workers_failed") and (
                figures["sent_per_s"] >= RATE_SHARE * figures["target_per_s"]
                and figures["rejected"] == 0
                and figures["transitions_lost"] == 0
                and figures["unconfirmed"] == 0
                and (figures["learner_updates_per_s"] or 0) > 0
                and figures["learner_updates_per_s"] >= LEARNER_SHARE * baseline
            )
            largest = max(largest, actors if sustained else 0)
            params = {
                "actors": actors,
                "shards": shards,
                "env": env_name,
                "rate_per_actor": PAPER_RATE,
                "window_s": seconds,
                "sustained": sustained,
                "hosts": "namespaces" if hosts else "this machine",
            }
            case = f"{env_name}-{actors}x{shards}" + ("-hosts" if hosts else "")
            for metric, value in {**figures, "sustained": float(sustained)}.items():
                if value is None:
                    failures.append(
                        f"no {metric}: the learner wrote too few progress "
                        "records with updates in the window"
                    )
                    continue
                records.append(
                    ok_record(SUITE, case, "apex", metric, UNITS[metric], [value], params)
                )
            if failures:
                records.append(
                    {
                        "suite": SUITE,
                        "case": case,
                        "implementation": "apex",
                        "status": "unavailable",
                        "reason": "; ".join(failures),
                        "params": params,
                    }
                )
    per_shard = largest / shards
    return {
        "records": records,
        "ratios": [],
        "config": {
            "env": env_name,
            "shards": shards,
            "sizes": list(sizes),
            "rate_per_actor": PAPER_RATE,
            "window_s": seconds,
            "largest_sustained": largest,
            "per_shard": per_shard,
            "actors_per_worker": ACTORS_PER_WORKER,
            "hosts": HOSTS if hosts else None,
            "paper_rate_note": "139 env frames/s, action repeat 4",
        },
    }
