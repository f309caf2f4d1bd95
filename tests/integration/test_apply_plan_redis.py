"""The Redis executor (playbooks/apply_plan_redis.yml) on the real 6-node Redis Cluster.

Every test writes its own plan whose current configuration is read from the running
nodes and whose target differs from it, so the tests do not depend on their order. The
password test runs a second, scratch cluster with requirepass (tests/integration/redis_auth,
ports 7301-7306) and stops it at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from ansible.module_utils.kairos_redis import parse_conf, read_topology, restart_order, same_value

from planner.loadgen import BackgroundLoad

from .conftest import BIN, LAB_TLS, REPO, PlaybookRun, lab_secret, redis_client, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.redis]

PORTS = {f"redis{i}": 7000 + i for i in range(1, 7)}
LAB = REPO / ".lab" / "redis"
AUTH_INVENTORY = REPO / "tests" / "integration" / "redis_auth" / "hosts.yml"
AUTH_PORTS = {f"redis{i}": 7300 + i for i in range(1, 7)}
AUTH_LAB = REPO / ".lab" / "redis-auth"
AUTH_PASSWORD = yaml.safe_load(AUTH_INVENTORY.read_text())["all"]["vars"]["vault_redis_password"]


# ----------------------------------------------------------------- helpers
def endpoints(ports: dict[str, int]) -> dict[str, str]:
    return {h: f"127.0.0.1:{p}" for h, p in ports.items()}


def client(port: int, password: str | None = None) -> redis.Redis:
    """A client of one node: the scratch cluster's with ``password``, else the lab's operator."""
    if password is None:
        return redis_client(port, decode_responses=True)
    return redis.Redis(port=port, password=password, decode_responses=True, socket_timeout=5)


def running(port: int, key: str, password: str | None = None) -> str:
    with client(port, password) as c:
        return str(c.config_get(key)[key])


def in_file(lab: Path, host: str, port: int) -> dict[str, str]:
    return parse_conf((lab / host / f"{port}.conf").read_text())


def pids(lab: Path = LAB) -> dict[str, int]:
    return {h: int((lab / h / "redis.pid").read_text()) for h in PORTS}


def topology(ports: dict[str, int] = PORTS, password: str = "") -> dict[str, Any]:
    """The cluster's topology read with ``password``, else as the lab's operator."""
    if password:  # the scratch cluster: plaintext
        return read_topology(endpoints(ports), password)
    return read_topology(endpoints(ports), lab_secret("redis-password"), tls=LAB_TLS)


def assert_healthy(ports: dict[str, int] = PORTS, password: str = "") -> dict[str, Any]:
    """cluster_state ok everywhere, 3 primaries with one linked replica each."""
    topo = topology(ports, password)
    assert topo["down"] == []
    for host, fact in topo["nodes"].items():
        assert fact["cluster_state"] == "ok", host
        assert fact["slots_ok"] == 16384, host
    assert len(topo["primaries"]) == 3
    assert all(len(r) == 1 for r in topo["primaries"].values()), topo["primaries"]
    assert all(topo["nodes"][r[0]]["link"] == "up" for r in topo["primaries"].values())
    return topo


def write_plan(
    path: Path,
    *,
    current: dict[str, Any],
    target: dict[str, Any],
    batches: list[list[str]] | None = None,
    cluster: str = "lab",
    per_node: dict[str, dict[str, Any]] | None = None,
) -> Path:
    restart_keys = {"io-threads", "io-threads-do-reads"}
    changed = [k for k in target if str(target[k]) != str(current.get(k))]
    restart = [k for k in changed if k in restart_keys]
    live = [k for k in changed if k not in restart_keys]
    live += sorted({k for o in (per_node or {}).values() for k in o} - set(live))
    now = datetime.now(UTC)
    plan = {
        "schema_version": 1,
        "kind": "kairos-plan",
        "cluster": cluster,
        "engine": "redis",
        "created_at": now.isoformat(),
        "horizon": {
            "start": (now - timedelta(minutes=5)).isoformat(),
            "step_seconds": 60,
            "steps": 30,
        },
        "provenance": {"source": "tests/integration/test_apply_plan_redis.py"},
        "availability": {"consistency_level": "ONE", "tolerated_failures": 0, "aggressive": False},
        "current_config": current,
        "steps": [
            {
                "id": "s1",
                "due": (now - timedelta(minutes=1)).isoformat(),
                "until": (now + timedelta(minutes=25)).isoformat(),
                "target": target,
                "per_node": per_node or {},
                "live": live,
                "restart": restart,
                "batches": (batches or [[h] for h in PORTS]) if restart else [],
                "expected": {"benefit_ops": 1.0e6, "cost_ops": 1.0e4, "net_ops": 9.9e5},
            }
        ],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def apply(plan: Path, *args: str) -> PlaybookRun:
    run = run_playbook("playbooks/apply_plan_redis.yml", "-e", f"plan={plan}", *args, timeout=900)
    print(f"\napply_plan_redis.yml rc={run.rc} in {run.seconds:.1f} s")
    return run


def state(plan: Path) -> dict[str, Any]:
    return json.loads(plan.with_name(plan.name + ".state.json").read_text())


def current_of(keys: list[str], ports: dict[str, int] = PORTS, password: str = "") -> dict:
    """The plan's current configuration: what redis1 runs (the nodes agree; checked here)."""
    values: dict[str, Any] = {}
    for key in keys:
        seen = {running(p, key, password or None) for p in ports.values()}
        assert len(seen) == 1, f"nodes disagree on {key}: {seen}"
        value = seen.pop()
        values[key] = int(value) if value.lstrip("-").isdigit() else value
    return values


#: The restart-class directive the restart tests flip. With io-threads at 1 (the role's
#: default) it changes nothing the nodes do, so the tests after this module (the Redis demo,
#: the calibration, the memory split) run on the configuration the lab's model was measured
#: on: flipping io-threads itself left the lab on 2 I/O threads, which in a quarter-core
#: envelope served the calibration's hash-read shape 20 % less (session 44).
RESTART_KEY = "io-threads-do-reads"
#: The live directives this module's tests change; put back when the module ends.
LIVE_KEYS = ("hz", "maxmemory-policy")


def restart_class_flip() -> tuple[dict[str, str], dict[str, str]]:
    """(current, target) of a restart-class change: RESTART_KEY to its other value."""
    now = running(PORTS["redis1"], RESTART_KEY)
    assert {running(p, RESTART_KEY) for p in PORTS.values()} == {now}, "nodes disagree"
    assert running(PORTS["redis1"], "io-threads") == "1", "the flip is inert only at io-threads 1"
    return {RESTART_KEY: now}, {RESTART_KEY: "yes" if now == "no" else "no"}


@pytest.fixture(scope="module", autouse=True)
def live_settings_restored(lab: PlaybookRun) -> Iterator[None]:
    """What the lab runs of LIVE_KEYS before this module, put back live after it."""
    before = current_of(list(LIVE_KEYS))
    yield
    # Node by node: a test's per-node override leaves the nodes disagreeing.
    if any(not same_value(running(p, k), v) for p in PORTS.values() for k, v in before.items()):
        restored = run_playbook("playbooks/change_settings_redis.yml",
                                "-e", json.dumps({"settings": before}))
        assert restored.rc == 0, restored.output[-3000:]
        assert current_of(list(LIVE_KEYS)) == before


# ----------------------------------------------------------------- tests
def test_live_only_change_restarts_nothing_and_file_matches(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    """A live step with a per-node override (issue 42: the value a plan gives one primary
    and its replica, which follows it): every node reads back its own value, in its conf
    file too, and nothing restarts."""
    current = current_of(["hz", "maxmemory-policy", "io-threads"])
    target = {
        **current,
        "hz": 20 if current["hz"] != 20 else 10,
        "maxmemory-policy": "allkeys-lfu" if current["maxmemory-policy"] != "allkeys-lfu"
        else "allkeys-lru",
    }
    primary, (replica,) = next(iter(topology()["primaries"].items()))
    own = {"maxmemory-policy": "volatile-lru"}
    before = pids()
    plan = write_plan(tmp_path / "live.yml", current=current, target=target,
                      per_node={primary: own, replica: own})

    run = apply(plan)

    assert run.rc == 0, run.output[-4000:]
    assert pids() == before, "a live-only change restarted a node"
    for host, port in PORTS.items():
        conf = in_file(LAB, host, port)
        expected = {**target, **own} if host in (primary, replica) else target
        for key in ("hz", "maxmemory-policy"):
            assert same_value(running(port, key), expected[key]), (host, key)
            assert same_value(conf[key], running(port, key)), (host, key, conf[key])
        assert not (LAB / host / f"{port}.conf.restart-pending").exists(), host
    assert state(plan)["steps"]["s1"]["status"] == "applied"
    assert_healthy()

    again = apply(plan)
    assert again.rc == 0 and "was applied" in again.output
    assert {h: c for h, c in again.recap().items() if h != "localhost"} == {}


def test_restart_change_under_load_fails_over_every_primary_and_keeps_live_changes(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    # A live change first (CONFIG SET, written into each conf file): the restarts below must
    # keep it, since a restarted node reads only its conf file.
    hz = current_of(["hz"])
    live = {"hz": 13 if hz["hz"] != 13 else 14}
    set_live = apply(write_plan(tmp_path / "live.yml", current=hz, target=live))
    assert set_live.rc == 0, set_live.output[-4000:]
    current, target = restart_class_flip()
    topo = assert_healthy()
    old_primaries = sorted(topo["primaries"])
    before = pids()
    # The plan lists primaries first: the executor must still restart replicas first.
    hosts = old_primaries + sorted(set(PORTS) - set(old_primaries))
    plan = write_plan(tmp_path / "restart.yml", current=current, target=target,
                      batches=[hosts])

    with BackgroundLoad(
        engine="redis",
        contact_points=tuple(endpoints(PORTS).values()),
        prefix="kairos_rollout_redis",
        mix={"read": 0.5, "write": 0.5},
        keys=2000,
        rate=250,
        concurrency=4,
        seed=11,
        max_seconds=400,
    ) as load:
        time.sleep(2)
        run = apply(plan)
        time.sleep(2)
    result = load.result()
    print(json.dumps({k: v for k, v in result.to_dict().items() if k != "steps"}))
    print(
        f"restart rollout: {run.seconds:.1f} s; load {result.ops} ops ({result.ops_per_s:.0f}/s), "
        f"failures {dict(result.failures)}, acknowledged writes {result.acknowledged_writes} "
        f"(unacknowledged {result.unacknowledged_writes}), lost {result.lost_acknowledged_writes}"
    )

    assert run.rc == 0, run.output[-5000:]
    assert result.ops > 0 and result.failures == {}
    assert result.acknowledged_writes > 0 and result.verified
    assert result.lost_acknowledged_writes == 0
    after = assert_healthy()
    assert pids().keys() == before.keys()
    assert all(pids()[h] != before[h] for h in PORTS), "every node restarted once"
    for host, port in PORTS.items():
        assert running(port, RESTART_KEY) == target[RESTART_KEY], host
        assert in_file(LAB, host, port)[RESTART_KEY] == target[RESTART_KEY], host
        assert running(port, "hz") == str(live["hz"]), f"{host} lost the live change at restart"
    # Every old primary was failed over before its restart, and is a replica now.
    timings = state(plan)["steps"]["s1"]["nodes"]
    print(json.dumps(timings))
    for host in PORTS:
        if host in old_primaries:
            assert timings[host]["failover"] > 0, host
            assert after["nodes"][host]["role"] == "replica", host
        else:
            assert timings[host]["failover"] == 0, host
    # Replicas first, then the old primaries: the order of the turns in the output.
    lines = run.output.splitlines()
    turns = [
        lines[i + 1].split("[", 1)[1].split("]", 1)[0]
        for i, line in enumerate(lines[:-1])
        if line.startswith("TASK [redis : Rollout | note when the node's turn")
    ]
    assert sorted(turns[:3]) == sorted(set(PORTS) - set(old_primaries)), turns
    assert sorted(turns[3:]) == old_primaries, turns


def test_replica_that_fails_to_restart_stops_the_rollout(lab: PlaybookRun, tmp_path: Path) -> None:
    current, target = restart_class_flip()
    topo = assert_healthy()
    hosts = list(PORTS)
    first = restart_order(topo, hosts)[0]
    assert first["role"] == "replica"
    victim = first["host"]
    mark = tmp_path / "failed-once"
    wrapper = tmp_path / "redis-server-faulty"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case "$1" in */{victim}/*)\n'
        f'  if [ ! -e "{mark}" ]; then : > "{mark}"\n'
        '    echo "injected start failure" >&2; exit 1\n'
        "  fi;;\n"
        "esac\n"
        'exec /usr/bin/redis-server "$@"\n'
    )
    wrapper.chmod(0o755)
    before = pids()
    plan = write_plan(tmp_path / "fault.yml", current=current, target=target)

    run = apply(plan, "-e", f"redis_server_bin={wrapper}")

    assert run.rc != 0
    assert f"rollout stopped: {victim} failed" in run.output
    assert mark.exists()
    recorded = state(plan)["steps"]["s1"]
    assert recorded["status"] == "failed" and victim in recorded["error"]
    assert_healthy()
    now = pids()
    assert now[victim] != before[victim]
    assert {h: p for h, p in now.items() if h != victim} == {
        h: p for h, p in before.items() if h != victim
    }, "nodes after the failed one were touched"
    port = PORTS[victim]
    assert running(port, RESTART_KEY) == current[RESTART_KEY]
    assert in_file(LAB, victim, port)[RESTART_KEY] == current[RESTART_KEY]

    refused = apply(plan)
    assert refused.rc != 0 and "to retry: -e retry_failed=true" in refused.output
    assert pids() == now


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown parameter", "no-such-knob"),
        ("out of range", "io-threads"),
        ("unknown node", "redis9"),
    ],
)
def test_bad_input_is_refused_before_anything_is_touched(
    lab: PlaybookRun, tmp_path: Path, case: str, message: str
) -> None:
    current = current_of(["io-threads", "hz"])
    if case == "unknown parameter":
        target = {**current, "hz": 11}
        plan = write_plan(tmp_path / "bad.yml", current=current, target=target)
        data = yaml.safe_load(plan.read_text())
        data["steps"][0]["target"]["no-such-knob"] = 1
        data["steps"][0]["live"].append("no-such-knob")
        plan.write_text(yaml.safe_dump(data, sort_keys=False))
    elif case == "out of range":
        plan = write_plan(tmp_path / "bad.yml", current=current,
                          target={**current, "io-threads": 500})
    else:
        target = {**current, "io-threads": 2 if current["io-threads"] == 1 else 1}
        plan = write_plan(tmp_path / "bad.yml", current=current, target=target,
                          batches=[[*PORTS, "redis9"]])
    before = pids()
    conf = {h: (LAB / h / f"{p}.conf").read_text() for h, p in PORTS.items()}

    run = apply(plan)

    assert run.rc != 0
    assert "plan refused before touching any node" in run.output
    assert message in run.output
    assert pids() == before
    assert conf == {h: (LAB / h / f"{p}.conf").read_text() for h, p in PORTS.items()}
    assert not plan.with_name(plan.name + ".state.json").exists()
    assert running(PORTS["redis1"], "hz") == str(current["hz"])


def test_a_primary_killed_during_the_batch_s_failover_halts_the_rollout(
    lab: PlaybookRun, tmp_path: Path
) -> None:
    """Fault under load (issue 41): kill -9 of a primary outside the batch while the batch's
    primary is being failed over. The executor restarts the replicas first, then the
    primaries: the kill lands when the first primary's failover begins. The rollout halts
    naming the dead node, releases its lock and takes no primary down; no WAIT-acknowledged
    write is lost. The dead node never answers again: the failover's wait and the rescue's
    gate stop once it has refused every connection for kairos_redis_down_grace (15 s), rather
    than at their timeouts (120 and 180 s)."""
    current, target = restart_class_flip()
    topo = assert_healthy()
    primaries = sorted(topo["primaries"])
    before = pids()
    plan = write_plan(tmp_path / "fault.yml", current=current, target=target)
    batch = victim = ""
    log = tmp_path / "fault.log"
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               PYTHONUNBUFFERED="1", ANSIBLE_DISPLAY_SKIPPED_HOSTS="true")
    killed_at = 0.0
    try:
        with BackgroundLoad(
            engine="redis", contact_points=tuple(endpoints(PORTS).values()),
            prefix="kairos_fault_redis", mix={"read": 0.5, "write": 0.5}, keys=2000, rate=250,
            concurrency=4, seed=17, max_seconds=400,
        ) as load:
            time.sleep(2)
            began = time.monotonic()
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [str(BIN / "ansible-playbook"), "playbooks/apply_plan_redis.yml",
                     "-e", f"plan={plan}"],
                    cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
                while proc.poll() is None and time.monotonic() - began < 900:
                    text = log.read_text()
                    turns = re.findall(r"note when the node's turn began\] \*+\n(?:.*\n)*?"
                                       r"ok: \[(\w+)\]", text)
                    if not killed_at and turns and turns[-1] in primaries and text.count(
                            "TASK [redis : Rollout | hand a primary's role") == len(turns):
                        batch = turns[-1]
                        victim = next(p for p in primaries if p != batch)
                        os.kill(before[victim], signal.SIGKILL)
                        killed_at = time.monotonic() - began
                    time.sleep(0.1)
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            time.sleep(8)  # the victim's replica takes its slots over (cluster-node-timeout 5 s)
        result = load.result()
        output = log.read_text()
        print(f"\nfault: {victim} killed {killed_at:.1f} s into the rollout of {batch}; "
              f"rollout rc={proc.returncode}; load {result.ops} ops, failures "
              f"{dict(result.failures)}, acknowledged writes {result.acknowledged_writes}, "
              f"lost {result.lost_acknowledged_writes}")
        assert killed_at, f"the failover never started:\n{output[-3000:]}"
        assert proc.returncode != 0, output[-4000:]
        assert f"reachable: {victim}:" in output, output[-4000:]
        assert f"a node down: {victim}: refused every connection for" in output, output[-4000:]
        recorded = state(plan)["steps"]["s1"]
        assert recorded["status"] == "failed" and victim in recorded["error"], recorded
        lock = REPO / ".kairos" / "lab-redis.lock"
        assert not lock.exists(), "the failed rollout kept the lock"
        # No primary was taken down: the batch's and the other one run the process they ran
        # before (only the replicas, restarted before the fault, run new ones).
        for host in primaries:
            if host != victim:
                assert pids()[host] == before[host] and Path(f"/proc/{before[host]}").exists()
        assert result.acknowledged_writes > 0 and result.verified
        assert result.lost_acknowledged_writes == 0
        assert "Traceback" not in output
    finally:
        # The runbook: bring the dead node back, then resume the step; the replicas restarted
        # before the fault run the target, the rest get it now (the lab left uniform).
        back = run_playbook("playbooks/lab_up.yml", "--limit", victim or "redis")
        assert back.rc == 0, back.output[-3000:]
        deadline = time.monotonic() + 90
        while True:
            try:
                assert_healthy()
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        resumed = apply(plan, "-e", "retry_failed=true")
        assert resumed.rc == 0, resumed.output[-4000:]
        assert current_of([RESTART_KEY]) == target
        assert_healthy()


# ------------------------------------------------------------- password on
@pytest.fixture(scope="module")
def auth_cluster(lab: PlaybookRun) -> Iterator[None]:
    """The scratch cluster with requirepass, brought up for this module and stopped after."""
    run = run_playbook("playbooks/redis.yml", "-i", str(AUTH_INVENTORY), timeout=300)
    print(f"\nauth cluster up: rc={run.rc} in {run.seconds:.1f} s")
    try:
        assert run.rc == 0, run.output[-4000:]
        yield
    finally:
        down = run_playbook("playbooks/lab_down.yml", "-i", str(AUTH_INVENTORY), timeout=300)
        assert down.rc == 0, down.output[-3000:]
        shutil.rmtree(AUTH_LAB, ignore_errors=True)
        for lock in (REPO / ".kairos").glob("lab-redis-auth*.lock"):
            lock.unlink(missing_ok=True)


def adhoc(module: str, args: dict[str, Any], *options: str) -> tuple[int, str]:
    proc = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-m", module, "-a", json.dumps(args), *options],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_password_cluster_modules_and_live_rollout(auth_cluster: None, tmp_path: Path) -> None:
    nodes = endpoints(AUTH_PORTS)
    with pytest.raises(redis.AuthenticationError):  # the scratch cluster: plaintext
        redis.Redis(host="127.0.0.1", port=AUTH_PORTS["redis1"], socket_timeout=5).ping()
    assert_healthy(AUTH_PORTS, AUTH_PASSWORD)

    # redis_live_config: check mode, apply, idempotent, bad input.
    port = AUTH_PORTS["redis2"]
    hz = int(running(port, "hz", AUTH_PASSWORD))
    args = {"port": port, "password": AUTH_PASSWORD, "settings": {"hz": hz + 1}}
    rc, out = adhoc("redis_live_config", args, "--check")
    assert rc == 0 and "changed: true" in out and running(port, "hz", AUTH_PASSWORD) == str(hz)
    rc, out = adhoc("redis_live_config", args)
    assert rc == 0 and "changed: true" in out and running(port, "hz", AUTH_PASSWORD) == str(hz + 1)
    rc, out = adhoc("redis_live_config", args)
    assert rc == 0 and "changed: false" in out
    rc, out = adhoc("redis_live_config", {**args, "settings": {"hz": hz}})
    assert rc == 0
    rc, out = adhoc("redis_live_config", {**args, "settings": {"no-such-knob": 1}})
    assert rc != 0 and "unknown directives" in out and "no-such-knob" in out
    # Restart-class directives: refused from the space's classes (restart_only) before any
    # CONFIG SET, and by the server itself when the caller did not name them.
    rc, out = adhoc("redis_live_config", {**args, "settings": {"io-threads": 2},
                                          "restart_only": ["io-threads"]})
    assert rc != 0 and "needs a restart" in out and "nothing was set" in out
    rc, out = adhoc("redis_live_config", {**args, "settings": {"io-threads": 2}})
    assert rc != 0 and "immutable config" in out and "nothing was set" in out
    rc, out = adhoc("redis_live_config", {**args, "password": "wrong"})
    assert rc != 0 and "cannot read the configuration" in out
    assert AUTH_PASSWORD not in out

    # redis_failover + redis_sync_gate with the password: hand redis1's role over and back.
    topo = topology(AUTH_PORTS, AUTH_PASSWORD)
    primary = sorted(topo["primaries"])[0]
    rc, out = adhoc("redis_failover", {"nodes": nodes, "node": primary, "password": AUTH_PASSWORD},
                    "--check")
    assert rc == 0 and "changed: true" in out
    rc, out = adhoc("redis_failover", {"nodes": nodes, "node": primary, "password": AUTH_PASSWORD})
    assert rc == 0 and "changed: true" in out, out
    assert topology(AUTH_PORTS, AUTH_PASSWORD)["nodes"][primary]["role"] == "replica"
    rc, out = adhoc("redis_failover", {"nodes": nodes, "node": primary, "password": AUTH_PASSWORD})
    assert rc == 0 and "changed: false" in out
    rc, out = adhoc("redis_sync_gate", {"nodes": nodes, "node": primary, "role": "replica",
                                        "password": AUTH_PASSWORD, "timeout": 30})
    assert rc == 0, out
    rc, out = adhoc("redis_sync_gate", {"nodes": nodes, "node": primary, "role": "primary",
                                        "password": AUTH_PASSWORD, "timeout": 2})
    assert rc != 0 and "not in sync" in out and f"role: {primary}: is a replica" in out

    # The executor end to end with the password: a live-only step.
    current = current_of(["hz", "maxmemory-policy"], AUTH_PORTS, AUTH_PASSWORD)
    target = {**current, "maxmemory-policy": "allkeys-lfu"}
    plan = write_plan(tmp_path / "auth.yml", current=current, target=target,
                      cluster="lab-redis-auth")
    run = apply(plan, "-i", str(AUTH_INVENTORY), "-v")
    assert run.rc == 0, run.output[-4000:]
    assert AUTH_PASSWORD not in run.output
    for host, p in AUTH_PORTS.items():
        assert running(p, "maxmemory-policy", AUTH_PASSWORD) == "allkeys-lfu"
        assert in_file(AUTH_LAB, host, p)["maxmemory-policy"] == "allkeys-lfu"
    assert AUTH_PASSWORD not in json.dumps(state(plan))
    assert_healthy(AUTH_PORTS, AUTH_PASSWORD)
