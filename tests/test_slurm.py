"""The Slurm path.

Fast tests check placement arithmetic and the rendered script (as text and with
``bash -n``). The rest submit real jobs through ``apex slurm submit`` to a real Slurm whose
three nodes are separate hosts: one slurmd in each of three network namespaces (learner
10.200.0.11, shard .12, actor .13; slurm/cluster/). The fixture installs and starts it,
and stops by PID file what it started. It needs root; without root these tests skip,
unless APEX_REQUIRE_SLURM=1 (set by scripts/test.sh when run as root, as in CI), in which
case a cluster that cannot start is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from apex.learning.metrics import read_metrics
from launch.cli import main
from launch.config import ConfigError, resolve
from launch.slurm.layout import (
    SlurmEnvironmentError,
    block_placement,
    job_layout,
    parse_tasks_per_node,
    role_index,
)
from launch.slurm.script import render
from launch.slurm_commands import job_state
from launch.supervision.processes import run_processes
from replay.server.credit_desk import MAX_WINDOW
from replay.store.snapshot import complete_snapshots
from replay.wire.keys import generate

CLUSTER = Path(__file__).parent.parent / "slurm" / "cluster"
APEX = [sys.executable, "-m", "launch"]
# Each role pinned to its own host; the small replay lets training start within seconds;
# runs end by their limits, never by solving early.
PINNED = (
    "--target-return",
    "1e9",
    "--set",
    'slurm.learner_options=["--nodelist=learner"]',
    "--set",
    'slurm.shard_options=["--nodelist=shard"]',
    "--set",
    'slurm.actor_options=["--nodelist=actor"]',
    "--set",
    "replay.min_size=500",
    "--set",
    "learner.checkpoint_interval_s=2.0",
    "--set",
    f"slurm.python={sys.executable}",  # the test cluster's nodes are this machine
)


def poll(condition, timeout_s: float, what: str, interval_s: float = 0.3):
    """Checks ``condition`` every ``interval_s`` until it is truthy or the deadline passes."""
    pause = threading.Event()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        pause.wait(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


# -- placement and script, no Slurm needed --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", [1]), ("2(x3)", [2, 2, 2]), ("2(x3),1", [2, 2, 2, 1]), ("4,3(x2)", [4, 3, 3])],
)
def test_tasks_per_node_is_read_as_slurm_writes_it(text, expected) -> None:
    assert parse_tasks_per_node(text) == expected


@pytest.mark.parametrize("text", ["", "x", "2(3)", "2(x)", "-1"])
def test_unreadable_tasks_per_node_is_refused(text) -> None:
    with pytest.raises(SlurmEnvironmentError, match="tasks per node"):
        parse_tasks_per_node(text)


def test_block_placement_fills_each_node_in_turn() -> None:
    slots = block_placement(["a", "b"], [2, 1])
    assert [(s.host, s.local_slot) for s in slots] == [("a", 0), ("a", 1), ("b", 0)]
    with pytest.raises(SlurmEnvironmentError):
        block_placement(["a"], [1, 1])


def fake_hostnames(nodelist: str) -> list[str]:
    return {"gpu1": ["gpu1"], "cpu[1-2]": ["cpu1", "cpu2"], "cpu[1-3]": ["cpu1", "cpu2", "cpu3"]}[
        nodelist
    ]


def test_hetjob_layout_gives_every_task_the_same_endpoints() -> None:
    config = resolve({"actors": 4, "shards": 4, "slurm": {"shard_nodes": 2, "actor_nodes": 2}})
    env = {
        "SLURM_JOB_NODELIST_HET_GROUP_0": "gpu1",
        "SLURM_TASKS_PER_NODE_HET_GROUP_0": "1",
        "SLURM_JOB_NODELIST_HET_GROUP_1": "cpu[1-2]",
        "SLURM_TASKS_PER_NODE_HET_GROUP_1": "2(x2)",
        "SLURM_JOB_NODELIST_HET_GROUP_2": "cpu[1-2]",
        "SLURM_TASKS_PER_NODE_HET_GROUP_2": "2(x2)",
        "SLURM_PROCID": "3",
    }
    layout = job_layout(config, env, fake_hostnames)
    assert layout.weights == "tcp://gpu1:5550" and layout.episodes == "tcp://gpu1:5551"
    assert [s.request for s in layout.shards] == [
        "tcp://cpu1:5601",
        "tcp://cpu1:5603",
        "tcp://cpu2:5601",
        "tcp://cpu2:5603",
    ]
    assert layout.shards[1].insert == "tcp://cpu1:5602"
    assert role_index("actor", config, env) == 3


def test_multi_prog_layout_counts_ranks_learner_shards_actors() -> None:
    config = resolve({"actors": 5, "shards": 2, "slurm": {"layout": "multi-prog"}})
    env = {
        "SLURM_STEP_NODELIST": "cpu[1-3]",
        "SLURM_STEP_TASKS_PER_NODE": "3(x2),2",
        "SLURM_PROCID": "4",
    }
    layout = job_layout(config, env, fake_hostnames)
    # ranks 0 learner (cpu1 slot 0), 1-2 shards (cpu1 slots 1-2), 3-7 actors
    assert layout.learner_host == "cpu1"
    assert [s.insert for s in layout.shards] == ["tcp://cpu1:5602", "tcp://cpu1:5604"]
    assert role_index("actor", config, env) == 1
    with pytest.raises(SlurmEnvironmentError, match="not a shard task"):
        role_index("shard", config, env)
    small = {**env, "SLURM_STEP_TASKS_PER_NODE": "1(x3)"}
    with pytest.raises(SlurmEnvironmentError, match="needs 8"):
        job_layout(config, small, fake_hostnames)


def test_a_task_outside_a_job_says_what_is_missing(tmp_path: Path) -> None:
    config = resolve({})
    with pytest.raises(SlurmEnvironmentError, match="SLURM_JOB_NODELIST_HET_GROUP_0"):
        job_layout(config, {}, fake_hostnames)


def test_hetjob_script_asks_gpus_for_the_learner_only_and_parses(tmp_path: Path) -> None:
    config = resolve(
        {
            "actors": 6,
            "shards": 2,
            "slurm": {"actor_nodes": 2, "learner_gpus": 1, "partition": "gpu", "time": "02:00:00"},
        }
    )
    script = render(config, tmp_path)
    components = script.split("#SBATCH hetjob")
    assert len(components) == 3
    assert "--gpus=1" in components[0]
    assert "--gpus" not in components[1] + components[2]
    assert "--ntasks=6" in components[2] and "--ntasks-per-node=3" in components[2]
    assert "--signal=B:USR1@120" in components[0] and "--requeue" in components[0]
    for component in components:
        assert "--partition=gpu" in component and "--time=02:00:00" in component
    path = tmp_path / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_multi_prog_script_lists_every_rank_once(tmp_path: Path) -> None:
    config = resolve({"actors": 4, "shards": 2, "slurm": {"layout": "multi-prog"}})
    script = render(config, tmp_path)
    assert "hetjob" not in script and "--ntasks=7" in script
    lines = script.split("<<'MULTI_PROG'\n")[1].split("\nMULTI_PROG")[0].splitlines()
    assert [line.split()[0] for line in lines] == ["0", "1-2", "3-6"]
    assert [line.split()[6] for line in lines] == ["learner", "shard", "actor"]
    path = tmp_path / "job.sh"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_a_relative_run_directory_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        render(resolve({}), Path("runs/x"))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"actors": 3, "slurm": {"actor_nodes": 2}}, "do not divide over slurm.actor_nodes"),
        ({"slurm": {"layout": "mesh"}}, "slurm.layout"),
        ({"slurm": {"weights_port": 80}}, "slurm.weights_port"),
        ({"slurm": {"colour": "red"}}, "unknown setting 'colour'"),
    ],
)
def test_bad_slurm_settings_are_refused(values, expected) -> None:
    with pytest.raises(ConfigError, match=expected):
        resolve(values)


def test_submit_dry_run_prints_the_script_and_writes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--dry-run",
            "--run-dir",
            str(run_dir),
            "--nodes",
            "2",
            "--actors-per-node",
            "3",
            "--gpus",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "--ntasks=6" in result.output and "--gpus=1" in result.output
    assert not run_dir.exists()


def test_a_script_made_here_names_no_path_of_this_machine_the_user_did_not_set() -> None:
    """A user's env and network (the examples package, found here in the repository):
    the script runs the nodes' own python3 and says where the modules come from; the
    submitter is told what the nodes would miss, and the setting that gives it."""
    example = Path(__file__).parents[1] / "examples" / "grid_world.toml"
    arguments = ["slurm", "submit", str(example), "--run-dir", "/shared/runs/grid", "--dry-run"]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, result.output
    script = result.stdout
    repo = str(Path(__file__).parents[1].resolve())
    for path in (sys.executable, sys.prefix, repo):
        assert path not in script
    assert "APEX=(python3 -m launch)" in script
    assert "examples.grid_world, examples.grid_network: from PYTHONPATH as sbatch" in script
    said = result.stderr
    assert "python on the nodes: python3 from their PATH" in said
    modules = "examples.grid_world, examples.grid_network"
    assert f"warning: your modules {modules} imported here from {repo}" in said
    assert f'set slurm.pythonpath = ["{repo}"]' in said

    given = [
        "--set",
        'slurm.pythonpath=["/shared/code"]',
        "--set",
        "slurm.python=/shared/venv/bin/python",
    ]
    result = CliRunner().invoke(main, [*arguments, *given])
    assert result.exit_code == 0, result.output
    assert 'export PYTHONPATH="/shared/code${PYTHONPATH:+:$PYTHONPATH}"' in result.stdout
    assert "APEX=(/shared/venv/bin/python -m launch)" in result.stdout
    assert "warning: your modules" in result.stderr  # found here elsewhere than /shared/code
    result = CliRunner().invoke(main, [*arguments, "--set", f'slurm.pythonpath=["{repo}"]'])
    assert "warning" not in result.stderr
    assert (
        f"examples.grid_world, examples.grid_network: from slurm.pythonpath ({repo})"
        in result.stderr
    )


def test_submit_refuses_bad_options_clearly(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["slurm", "submit", "--dry-run", "--shards", "3", "--shard-nodes", "2"]
    )
    assert result.exit_code == 2 and "do not divide over slurm.shard_nodes" in result.output
    result = runner.invoke(main, ["slurm", "submit", "--dry-run", "--nodes", "0"])
    assert result.exit_code == 2 and "--nodes" in result.output
    result = runner.invoke(main, ["slurm", "status", str(tmp_path)])
    assert result.exit_code == 2 and "not a run directory" in result.output


# -- a real Slurm, three namespace hosts ------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    required = os.environ.get("APEX_REQUIRE_SLURM") == "1"
    if os.geteuid() != 0:
        if required:
            pytest.fail("APEX_REQUIRE_SLURM=1 but the tests do not run as root")
        pytest.skip("a real Slurm in network namespaces needs root")
    try:
        # Daemons of an earlier run may live in the namespaces: stop them first.
        subprocess.run(["bash", str(CLUSTER / "slurm.sh"), "down"], check=True, timeout=60)
        subprocess.run(["bash", str(CLUSTER / "netns.sh"), "up"], check=True, timeout=60)
        subprocess.run(["bash", str(CLUSTER / "slurm.sh"), "up", "ns3"], check=True, timeout=600)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError) as exc:
        subprocess.run(["bash", str(CLUSTER / "slurm.sh"), "down"], check=False, timeout=60)
        subprocess.run(["bash", str(CLUSTER / "netns.sh"), "down"], check=False, timeout=60)
        if required:
            pytest.fail(f"could not start the test cluster: {exc}")
        pytest.skip(f"could not start the test cluster: {exc}")
    yield
    subprocess.run(["bash", str(CLUSTER / "slurm.sh"), "down"], check=False, timeout=60)
    subprocess.run(["bash", str(CLUSTER / "netns.sh"), "down"], check=False, timeout=60)


def submit(run_dir: Path, *options: str) -> str:
    result = subprocess.run(
        [*APEX, "slurm", "submit", "--run-dir", str(run_dir), *PINNED, *options],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"run directory: {run_dir}" in result.stdout
    return (run_dir / "slurm-job-id").read_text().strip()


def job_output(run_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted(run_dir.glob("slurm-*.out")))


def wait_for_job_end(job_id: str, run_dir: Path, timeout_s: float) -> dict[str, str]:
    def ended():
        fields = job_state(job_id)
        return fields if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED") else None

    try:
        return poll(ended, timeout_s, f"job {job_id} to end")
    except AssertionError:
        subprocess.run(["scancel", job_id], check=False, timeout=30)
        raise AssertionError(
            f"job {job_id} did not end; its output:\n{job_output(run_dir)}"
        ) from None


def end_record(run_dir: Path) -> dict:
    ends = [r for r in read_metrics(run_dir) if r.get("event") == "end"]
    assert ends, job_output(run_dir)
    return ends[-1]


def latest_progress(run_dir: Path) -> dict:
    progress = [r for r in read_metrics(run_dir) if r.get("event") == "progress"]
    return progress[-1] if progress else {}


def latest_updates(run_dir: Path) -> int:
    """The learner's updates in its newest record that counts them: the evaluations come
    several times a second, the progress records only every ``metrics_interval_s``."""
    counted = [r["updates"] for r in read_metrics(run_dir) if "updates" in r]
    return counted[-1] if counted else 0


# Asks a shard for INFO from wherever it runs; prints "answered" or "refused".
_INFO_PROBE = """
import sys
from replay.errors import ReplayTimeout
from replay.protocol.requests import RequestClient
from replay.wire.security import SecurityConfig, make_context
context = make_context(SecurityConfig(sys.argv[2] or None), need_server_secret=False)
client = RequestClient(context, sys.argv[1], sender=4242, timeout_s=3.0)
try:
    client.info()
    print("answered")
except ReplayTimeout:
    print("refused")
client.close()
context.destroy(linger=0)
"""


@pytest.mark.slow
def test_a_dpg_run_spans_three_hosts_refuses_strangers_and_survives_a_killed_actor_and_a_cut_link(
    cluster, tmp_path: Path
) -> None:
    """One job for what every submitted run must do (the roles on three hosts, the shards
    reached by name, CURVE keys made by submit, curves and status at the end), for the
    shards' refusals seen from another host, and for the faults of the actors' host: one
    actor killed with -9 (its task brings it back) and the host's link cut for 6 s (the
    others resume, nothing of theirs lost). Pendulum: Ape-X DPG (Box actions) takes the
    same Slurm path as DQN, which the other jobs here run."""
    run_dir = tmp_path / "run"
    # Three actors, all on host "actor", two shards on host "shard"; the run ends by time,
    # well after the faults: the killed actor's new process starts while its host is cut
    # off, and under a loaded suite took over 10 s to be heard again.
    job_id = submit(
        run_dir,
        "--env",
        "Pendulum-v1",
        "--shards",
        "2",
        "--actors-per-node",
        "3",
        "--max-time",
        "45",
        "--target-return",
        "1e9",
    )
    # Training can start on two actors' data while the third still starts up; one the
    # learner first hears after the cut has no silence to show (seen once in CI: 1.01 s).
    poll(
        lambda: (p := latest_progress(run_dir)) and p["updates"] > 50 and p["actors_heard"] == 3,
        120,
        "training to start with all three actors heard",
    )
    generate(tmp_path / "stranger")
    # A client pair the run never admitted, pinned to the run's real server key.
    generate(tmp_path / "unadmitted")
    (tmp_path / "unadmitted" / "server.key_secret").unlink()
    shutil.copy(run_dir / "keys" / "server.key", tmp_path / "unadmitted" / "server.key")
    endpoint = "tcp://shard:5601"  # shard 0's requests, on host "shard" (shard_port_base + 1)

    # All four at once: a refused probe waits out its 3 s timeout, and the run is short.
    key_dirs = (str(run_dir / "keys"), "", str(tmp_path / "stranger"), str(tmp_path / "unadmitted"))
    command = ["ip", "netns", "exec", "actor", sys.executable, "-c", _INFO_PROBE, endpoint]
    probes = {
        keys: subprocess.Popen(
            [*command, keys], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for keys in key_dirs
    }
    answers = {}
    for keys, process in probes.items():
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        answers[keys] = out.strip()
    assert answers[str(run_dir / "keys")] == "answered"
    assert answers[""] == "refused"  # no key
    assert answers[str(tmp_path / "stranger")] == "refused"  # another run's keys
    assert answers[str(tmp_path / "unadmitted")] == "refused"

    victim = poll(lambda: kept_pid(run_dir, "actor", 1), 30, "actor 1's process")
    os.kill(victim, signal.SIGKILL)
    subprocess.run(["ip", "link", "set", "veth-actor", "down"], check=True, timeout=10)
    cut_at = time.monotonic()
    try:
        poll(lambda: time.monotonic() - cut_at >= 6, 10, "6 s of cut link", interval_s=0.5)
    finally:
        subprocess.run(["ip", "link", "set", "veth-actor", "up"], check=True, timeout=10)
    fields = wait_for_job_end(job_id, run_dir, timeout_s=120)
    output = job_output(run_dir)
    assert fields["JobState"] == "COMPLETED", output
    assert "starts on learner" in output
    assert "actor task 1 died (exit code -9); restarting" in output
    refused = [r["refused"] for r in read_metrics(run_dir) if r.get("event") == "progress"][-1]
    assert refused["no_key"] >= 1 and refused["wrong_key"] >= 1, refused
    assert refused["not_admitted"] >= 1, refused
    starts = [r for r in read_metrics(run_dir) if r.get("event") == "start"]
    # One learner's life: the delivery below is its view of the whole run.
    assert [start["algorithm"] for start in starts] == ["DDPG"], output
    end = end_record(run_dir)
    assert end["reason"] == "max_time" and end["updates"] > 50
    delivery = end["delivery"]
    assert delivery["actors_heard"] == 3 and delivery["actors_gone"] == [], delivery
    for actor in delivery["actors"].values():
        assert actor["transitions_received"] > 0
    assert delivery["shards_answering"] == 2
    # The shards held the learner's samples for their rate limiters while the actors were
    # cut off: a wait, not an outage.
    assert delivery["shard_outages"] == [], delivery
    for index in ("0", "2"):
        survivor = delivery["actors"][index]
        assert survivor["longest_silence_s"] >= 5.0, (index, delivery["actors"])
        assert survivor["missing"] == survivor["in_transit"], delivery  # nothing lost
    # The run lost what actor 1's killed life had sent and no shard confirmed: at most
    # each shard's whole window of its batches (of small ones, the most).
    restarted = delivery["actors"]["1"]
    lost = restarted["missing"] - restarted["in_transit"]
    insert_batch = json.loads((run_dir / "config.json").read_text())["actor"]["insert_batch"]
    assert delivery["transitions_lost"] == lost <= 2 * MAX_WINDOW * insert_batch, delivery
    assert Path(end["checkpoint"]).exists()
    # Shards bound on the shard host and were reached by name from the other two.
    assert output.count('"ready": {"insert": "tcp://0.0.0.0:560') == 2
    # At the end each shard got SIGTERM from the learner's task and again from the batch
    # script: it wrote its final snapshot and exited cleanly.
    assert len(re.findall(r"written \(final, ", output)) == 2, output
    assert "shard: task 0: Exited" not in output, output
    status = subprocess.run(
        [*APEX, "slurm", "status", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0 and "COMPLETED" in status.stdout
    assert f"ended: max_time after {end['updates']} updates" in status.stdout, status.stdout
    assert "actor processes" in status.stdout and "checkpoint: " in status.stdout
    assert "security: curve; refused connections: no_key" in status.stdout, status.stdout
    # The learner's task drew the run's curves before it ended the job.
    assert (run_dir / "curves.png").stat().st_size > 10_000
    # Compute-node ports are open to the cluster: submit made the run keys, secrets 0600.
    config = json.loads((run_dir / "config.json").read_text())
    assert config["security"]["keys"] == str(run_dir / "keys")
    assert stat.S_IMODE((run_dir / "keys" / "server.key_secret").stat().st_mode) == 0o600


@pytest.mark.slow
def test_a_signalled_job_checkpoints_requeues_and_resumes(cluster, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # A CPU learner makes 600 CartPole updates in about 3 s when the machine is idle: the
    # limit leaves the signal, which comes at 300, a margin of about 6 s to land in.
    job_id = submit(run_dir, "--max-updates", "1500")
    poll(lambda: latest_updates(run_dir) >= 300, 120, "300 updates")
    # What Slurm sends signal_before_end_s before the time limit.
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True, timeout=30)
    poll(lambda: job_state(job_id).get("Restarts") == "1", 60, "the job to requeue itself")
    # Slurm holds a requeued job until its old credentials expire (cred_expire, 5 s in the
    # test cluster, 120 s by default); starting it earlier gets it killed as non-startable.
    fields = wait_for_job_end(job_id, run_dir, timeout_s=240)
    output = job_output(run_dir)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", output
    starts = [r for r in read_metrics(run_dir) if r.get("event") == "start"]
    ends = [r for r in read_metrics(run_dir) if r.get("event") == "end"]
    assert len(starts) == 2 and len(ends) == 2, output
    assert ends[0]["reason"] == "stopped" and ends[0]["updates"] >= 300
    # Every step got the signal at once; the shards took the actors' last flush before
    # their final snapshot (ShardServer._serve_stop_grace), so the first life lost nothing.
    assert ends[0]["delivery"]["transitions_lost"] == 0, ends[0]["delivery"]
    # The second start resumed from the first end's checkpoint: counters carry on.
    assert starts[1]["updates"] == ends[0]["updates"]
    assert starts[1]["weight_version"] == ends[0]["weight_version"] + 1
    assert ends[1]["reason"] == "max_updates" and ends[1]["updates"] == 1500
    assert "requeueing job" in output and "restart 1" in output
    # The actor stopped on its TERM at the end of each life, its last flush taken.
    assert output.count("actor 0 stopping") == 2 and "Killed" not in output, output
    # The shard wrote its replay at the signal, and the requeued job's shard started from it.
    final = [int(n) for n in re.findall(r"written \(final, [^)]*, (\d+) transitions\)", output)]
    restored = [int(n) for n in re.findall(r"restored \S+: (\d+) transitions", output)]
    assert final and len(restored) == 1 and restored[0] > 0, output
    # Everything the shard held when it stopped came back (the goal: at least 99%).
    assert restored[0] == final[0], (final, restored)
    assert json.loads((run_dir / "config.json").read_text())["learner"]["max_updates"] == 1500


def kept_pid(run_dir: Path, role: str, rank: int = 0) -> int | None:
    """The process of the role that task ``rank`` keeps (``launch.slurm.keeper``), not the task's
    own process: ``slurm task ROLE --kept``, or the ``apex replay`` a shard task's becomes."""
    task = f"slurm task {role} ".encode()
    for pid, found in run_processes(run_dir).items():
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if (
                found == role
                and (b"--kept" in command or task not in command)
                and f"SLURM_PROCID={rank}".encode() in environ
            ):
                return pid
    return None


@pytest.mark.slow
def test_a_killed_impala_learner_comes_back_inside_the_job(cluster, tmp_path: Path) -> None:
    """IMPALA takes the Slurm path as Ape-X does: queue shards, unrolls over the hosts, and
    a learner killed with -9 restarted by its task's keeper from its V-trace checkpoint
    (DQN's learner restart is the local fault suite's, its requeue the test above)."""
    run_dir = tmp_path / "run"
    # The kill comes at about 160 updates (2 s in, at the first checkpoint); the CPU
    # learner makes 500 about 3 s later, 700 leaves it a margin under load.
    job_id = submit(
        run_dir,
        "--max-updates",
        "700",
        "--set",
        "learner.checkpoint_interval_s=2",
        "--set",
        "algorithm=impala",
    )
    poll(
        lambda: latest_updates(run_dir) >= 100 and list((run_dir / "checkpoints").glob("*.pt")),
        120,
        "100 updates and a checkpoint",
    )
    os.kill(poll(lambda: kept_pid(run_dir, "learner"), 30, "the learner's process"), signal.SIGKILL)
    fields = wait_for_job_end(job_id, run_dir, timeout_s=240)
    output = job_output(run_dir)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "0", output
    assert "learner died (exit code -9); restarting" in output
    # Every component's step ended clean, and the job says so (a hetjob's exit is the
    # learner's step's, or another's that ended unclean).
    assert "with exit code 0 (learner 0, shards 0, actors 0)" in output
    starts = [r for r in read_metrics(run_dir) if r.get("event") == "start"]
    assert len(starts) == 2 and starts[1]["updates"] > 0, output  # from its checkpoint
    assert starts[1]["algorithm"] == "IMPALA"
    end = end_record(run_dir)
    assert end["reason"] == "max_updates" and end["updates"] == 700
    assert end["delivery"]["transitions_lost"] == 0, end["delivery"]


@pytest.mark.slow
def test_a_multi_prog_r2d2_job_fills_three_nodes_and_survives_kill_9_of_shard_and_learner(
    cluster, tmp_path: Path
) -> None:
    """The multi-prog layout, with R2D2: its sequences cross the hosts to the shard as
    transitions do (DQN, DPG and IMPALA take the hetjob layout in the jobs above), and its
    shard and learner, killed with -9 together, come back inside the job: the shard from its
    snapshot of sequences, the learner from its R2D2 checkpoint. R2D2's recoveries are
    proved here; the local supervisor's restarts, the same for every algorithm, are
    tests/test_train.py's."""
    run_dir = tmp_path / "run"
    # 1 learner + 1 shard + 3 actors over 3 nodes, 2 tasks per node, nodes in name order:
    # actor (learner, shard), learner (actors 0-1), shard (actor 2). Ranks: learner 0,
    # shard 1, actors 2-4.
    r2d2 = [
        "algorithm=r2d2",
        "replay.min_size=64",
        "learner.batch_size=16",
        "r2d2.sequence_length=8",
        "r2d2.sequence_period=4",
        "r2d2.burn_in=2",
        "r2d2.lstm_units=16",
        "replay.snapshot_interval_s=1",
        "learner.checkpoint_interval_s=1",
    ]
    job_id = submit(
        run_dir,
        "--layout",
        "multi-prog",
        "--nodes",
        "3",
        "--set",
        "actors=3",
        "--max-updates",
        "500",
        *(part for setting in r2d2 for part in ("--set", setting)),
    )

    def ready_to_kill() -> bool:
        return (
            latest_updates(run_dir) >= 100
            and bool(complete_snapshots(run_dir / "replay" / "shard-0"))
            and bool(list((run_dir / "checkpoints").glob("*.pt")))
        )

    poll(ready_to_kill, 120, "100 updates, a checkpoint and a snapshot")
    for role, rank in (("shard", 1), ("learner", 0)):
        os.kill(
            poll(lambda r=role, k=rank: kept_pid(run_dir, r, k), 30, f"the {role}'s process"),
            signal.SIGKILL,
        )
    fields = wait_for_job_end(job_id, run_dir, timeout_s=240)
    output = job_output(run_dir)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "0", output
    assert "starts on actor" in output
    assert "shard task 1 died (exit code -9); restarting" in output
    assert "learner died (exit code -9); restarting" in output
    assert re.search(r"restored \S+: [1-9]\d* transitions", output), output
    starts = [r for r in read_metrics(run_dir) if r.get("event") == "start"]
    assert len(starts) == 2 and starts[1]["updates"] > 0, output  # from its checkpoint
    assert {r["algorithm"] for r in starts} == {"R2D2"}
    end = end_record(run_dir)
    assert end["reason"] == "max_updates" and end["updates"] == 500
    assert end["delivery"]["actors_heard"] == 3, end["delivery"]
    for actor in end["delivery"]["actors"].values():
        assert actor["transitions_received"] > 0


@pytest.mark.parametrize("layout", ["hetjob", "multi-prog"])
def test_the_committed_example_scripts_are_what_submit_renders(layout) -> None:
    slurm_dir = Path(__file__).parent.parent / "slurm"
    result = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            str(slurm_dir / "cartpole-cluster.toml"),
            "--layout",
            layout,
            "--run-dir",
            "/shared/runs/cartpole",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == (slurm_dir / f"example-{layout}.sbatch").read_text()
