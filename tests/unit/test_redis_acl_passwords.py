"""library/redis_acl_passwords.py: its pure parts (ACL GETUSER replies, the plan), then the
module run as Ansible does (tests/unit/test_modules_harness.py) against a real redis-server
this test starts on a free port of 127.0.0.1:7400-7409 (planner/lab/scratch_redis.py, no
cluster, requirepass) and stops by its PID. Every login is checked with a real redis-py
client. The server tests skip when redis-server is not installed or no port is free."""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from planner.lab.scratch_redis import ScratchRedis, ScratchRedisError, port_is_free, scratch_redis
from tests.unit.test_modules_harness import (
    SECRET,
    ModuleFailed,
    assert_no_secret,
    refused,
    run_module,
)

acl = importlib.import_module("redis_acl_passwords")

MODULE = "redis_acl_passwords"
#: The default user's password before the rotation; SECRET is its new one.
OLD_DEFAULT = "old-default-pw"
APP_OLD, APP_NEW = "app-old-pw", "app-new-pw"
PASSWORDS = (SECRET, OLD_DEFAULT, APP_OLD, APP_NEW)
needs_server = pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not installed (Debian's redis-server package)")


def sha(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def assert_no_password(*values: Any) -> None:
    """No password of these tests (nor its digest) in ``values``."""
    assert_no_secret(*values)
    text = json.dumps(values, default=str)
    for password in PASSWORDS:
        assert password not in text and sha(password) not in text


# ------------------------------------------------------------------ ACL GETUSER replies
def _resp2(passwords: list[str]) -> list[Any]:
    return ["flags", ["on"], "passwords", passwords, "commands", "+@all", "keys", "~*",
            "channels", "", "selectors", []]


def _bytes(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [_bytes(v) for v in value]
    if isinstance(value, dict):
        return {_bytes(k): _bytes(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("resp", [2, 3])
def test_acl_passwords_reads_flat_lists_and_maps(resp: int, as_bytes: bool) -> None:
    digests = [sha("b"), sha("a")]
    reply: Any = _resp2(digests)
    if resp == 3:
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    if as_bytes:
        reply = _bytes(reply)
    assert acl.acl_passwords(reply) == sorted(digests)


def test_acl_passwords_of_a_missing_user_and_of_a_user_without_passwords() -> None:
    assert acl.acl_passwords(None) is None
    assert acl.acl_passwords(_resp2([])) == []
    assert acl.acl_passwords({"flags": ["on", "nopass"]}) == []


# ------------------------------------------------------------------ the plan
OLD, NEW, OTHER = sha("old"), sha("new"), sha("other")


def test_added_gives_the_new_digest_beside_the_old() -> None:
    assert acl.plan({"app": NEW}, {"app": [OLD]}, "added") == {"app": [f"#{NEW}"]}
    assert acl.plan({"app": NEW}, {"app": []}, "added") == {"app": [f"#{NEW}"]}


def test_pruned_removes_every_other_digest() -> None:
    rules = acl.plan({"app": NEW}, {"app": [NEW, OLD, OTHER]}, "pruned")
    assert rules == {"app": [f"!{OLD}", f"!{OTHER}"]}


def test_pruned_adds_the_new_digest_a_node_missed() -> None:
    assert acl.plan({"app": NEW}, {"app": [OLD]}, "pruned") == {"app": [f"!{OLD}", f"#{NEW}"]}


def test_a_user_the_node_does_not_know_is_left_alone() -> None:
    for state in ("added", "pruned"):
        assert acl.plan({"ghost": NEW}, {"ghost": None}, state) == {}
        assert acl.plan({"ghost": NEW}, {}, state) == {}


def test_nothing_to_do_plans_nothing() -> None:
    assert acl.plan({"app": NEW}, {"app": [NEW, OLD]}, "added") == {}
    assert acl.plan({"app": NEW, "default": OLD}, {"app": [NEW], "default": [OLD]},
                    "pruned") == {}


def test_each_user_is_planned_on_its_own() -> None:
    rules = acl.plan({"a": NEW, "b": NEW, "c": NEW}, {"a": [OLD], "b": [NEW], "c": None},
                     "added")
    assert rules == {"a": [f"#{NEW}"]}


# ------------------------------------------------------------------ refused before a login
def test_a_user_without_a_password_is_refused() -> None:
    refused(MODULE, {"node": "127.0.0.1:7409", "password": SECRET,
                     "users": [{"name": "app", "password": ""}]},
            r"^users\[0\]: needs a name and a non-empty password$")


def test_a_node_that_is_not_host_port_fails_cleanly() -> None:
    """It used to raise RedisModuleError out of the module (a traceback, MODULE FAILURE)."""
    result = refused(MODULE, {"node": "localhost", "password": SECRET,
                              "users": [{"name": "default", "password": SECRET}]},
                     r"not a host:port endpoint: 'localhost'")
    assert_no_password(result)


# ------------------------------------------------------------------ a real redis-server
@pytest.fixture
def server() -> Iterator[ScratchRedis]:
    """A scratch redis-server whose default user has OLD_DEFAULT and user app APP_OLD."""
    try:
        with scratch_redis(cluster=False, password=OLD_DEFAULT) as scratch:
            with scratch.client() as client:
                client.execute_command("ACL", "SETUSER", "app", "on", f">{APP_OLD}", "~*",
                                       "+@all")
            yield scratch
    except ScratchRedisError as exc:
        pytest.skip(str(exc))


def logs_in(server: ScratchRedis, password: str, username: str | None = None) -> bool:
    client = server.client(username=username, password=password)
    try:
        return bool(client.ping())
    except redis.AuthenticationError:
        return False
    finally:
        client.close()


def admin(server: ScratchRedis, password: str = SECRET) -> Any:
    return server.client(password=password)


def rotate(server: ScratchRedis, state: str, **args: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "node": server.address, "password": SECRET,
        "users": [{"name": "default", "password": SECRET},
                  {"name": "app", "password": APP_NEW, "rules": "~* +@all"}],
        "state": state, **args}
    result = run_module(MODULE, params)
    assert_no_password(result)
    return result


@needs_server
def test_a_full_rotation_of_the_default_user_and_an_acl_user(server: ScratchRedis) -> None:
    added = rotate(server, "added", previous_password=OLD_DEFAULT, masteruser="app",
                   masterauth=APP_NEW)
    assert added == {"changed": True, "changed_users": ["app", "default"], "absent": [],
                     "masterauth_changed": True, "requirepass_changed": False}
    # Both passwords of both users log in, midway.
    assert logs_in(server, OLD_DEFAULT) and logs_in(server, SECRET)
    assert logs_in(server, APP_OLD, "app") and logs_in(server, APP_NEW, "app")
    with admin(server) as client:
        assert client.config_get("masterauth") == {"masterauth": APP_NEW}
        assert client.config_get("masteruser") == {"masteruser": "app"}
        assert sorted(client.acl_getuser("app")["passwords"]) == sorted([sha(APP_OLD),
                                                                          sha(APP_NEW)])

    pruned = rotate(server, "pruned")
    assert pruned == {"changed": True, "changed_users": ["app", "default"], "absent": [],
                      "masterauth_changed": False, "requirepass_changed": True}
    assert not logs_in(server, OLD_DEFAULT) and logs_in(server, SECRET)
    assert not logs_in(server, APP_OLD, "app") and logs_in(server, APP_NEW, "app")
    with admin(server) as client:
        assert client.acl_getuser("default")["passwords"] == [sha(SECRET)]
        assert client.acl_getuser("app")["passwords"] == [sha(APP_NEW)]
        assert client.config_get("masterauth") == {"masterauth": APP_NEW}  # left as set
        # The app user's rules are not the module's business.
        assert "+@all" in next(u for u in client.acl_list() if u.startswith("user app "))


@needs_server
def test_a_second_run_of_either_pass_changes_nothing(server: ScratchRedis) -> None:
    nothing = {"changed": False, "changed_users": [], "absent": [],
               "masterauth_changed": False, "requirepass_changed": False}
    rotate(server, "added", previous_password=OLD_DEFAULT, masterauth=SECRET)
    assert rotate(server, "added", previous_password=OLD_DEFAULT, masterauth=SECRET) == nothing
    assert rotate(server, "pruned")["changed"]
    assert rotate(server, "pruned") == nothing
    # A rotation already done: the new password logs in, the previous one is not needed.
    assert rotate(server, "added", masterauth=SECRET) == nothing


@needs_server
def test_requirepass_follows_the_default_users_new_password(server: ScratchRedis) -> None:
    """ACL SETUSER alone left requirepass with the old password, which CONFIG GET showed
    and a CONFIG REWRITE would have written back into the conf for the next start."""
    rotate(server, "added", previous_password=OLD_DEFAULT)
    with admin(server) as client:
        assert client.config_get("requirepass") == {"requirepass": OLD_DEFAULT}  # midway
    assert rotate(server, "pruned")["requirepass_changed"]
    with admin(server) as client:
        assert client.config_get("requirepass") == {"requirepass": SECRET}
        assert client.acl_getuser("default")["passwords"] == [sha(SECRET)]


@needs_server
def test_an_acl_user_logs_in_to_rotate_others(server: ScratchRedis) -> None:
    """With ``username``, the login is that user's: app rotates the default user."""
    with admin(server, OLD_DEFAULT) as client:
        client.execute_command("ACL", "SETUSER", "app", f">{SECRET}")
    args = {"node": server.address, "username": "app", "password": SECRET,
            "users": [{"name": "default", "password": APP_NEW}]}
    assert run_module(MODULE, {**args, "state": "added"})["changed_users"] == ["default"]
    assert logs_in(server, OLD_DEFAULT) and logs_in(server, APP_NEW)
    assert run_module(MODULE, {**args, "state": "pruned"})["changed_users"] == ["default"]
    assert not logs_in(server, OLD_DEFAULT) and logs_in(server, APP_NEW)


@needs_server
def test_a_user_the_node_does_not_know_is_absent(server: ScratchRedis) -> None:
    users = [{"name": "ghost", "password": APP_NEW}, {"name": "app", "password": APP_NEW}]
    for state in ("added", "pruned"):
        result = run_module(MODULE, {"node": server.address, "password": OLD_DEFAULT,
                                     "users": users, "state": state})
        assert result["absent"] == ["ghost"] and result["changed_users"] == ["app"]
        assert_no_password(result)
    with admin(server, OLD_DEFAULT) as client:
        assert client.acl_getuser("ghost") is None  # not created
    assert logs_in(server, APP_NEW, "app") and not logs_in(server, APP_OLD, "app")


@needs_server
@pytest.mark.parametrize("previous", ["", "wrong-previous-pw"])
def test_a_refused_login_fails_naming_the_node_and_no_password(
        server: ScratchRedis, previous: str) -> None:
    with pytest.raises(ModuleFailed) as failed:
        rotate(server, "added", password=SECRET, previous_password=previous)
    message = str(failed.value)
    assert message.startswith(f"{server.address}: cannot log in: AuthenticationError")
    assert_no_password(failed.value.result)
    assert previous == "" or previous not in message
    with admin(server, OLD_DEFAULT) as client:  # nothing changed
        assert client.acl_getuser("default")["passwords"] == [sha(OLD_DEFAULT)]
        assert client.acl_getuser("app")["passwords"] == [sha(APP_OLD)]


@needs_server
def test_a_node_that_does_not_answer_fails_without_trying_the_previous_password() -> None:
    port = next((p for p in range(7400, 7410) if port_is_free(p, bus=False)), None)
    if port is None:
        pytest.skip("no free port in 127.0.0.1:7400-7409")
    result = refused(MODULE, {"node": f"127.0.0.1:{port}", "password": SECRET,
                              "previous_password": OLD_DEFAULT, "connect_timeout": 2,
                              "users": [{"name": "default", "password": SECRET}]},
                     rf"^127\.0\.0\.1:{port}: cannot log in: ConnectionError")
    assert_no_password(result)


@needs_server
@pytest.mark.parametrize("decode", [False, True], ids=["bytes", "str"])
@pytest.mark.parametrize("protocol", [2, 3])
def test_acl_passwords_reads_the_servers_own_replies(server: ScratchRedis, protocol: int,
                                                     decode: bool) -> None:
    """ACL GETUSER as the server sends it (no redis-py response parsing), RESP2 and RESP3."""
    with server.client(password=OLD_DEFAULT, protocol=protocol,
                       decode_responses=decode) as client:
        conn = client.connection_pool.get_connection()
        try:
            replies = []
            for name in ("app", "ghost"):
                conn.send_command("ACL", "GETUSER", name)
                replies.append(conn.read_response())
        finally:
            client.connection_pool.release(conn)
    assert isinstance(replies[0], dict if protocol == 3 else list)
    assert acl.acl_passwords(replies[0]) == [sha(APP_OLD)]
    assert acl.acl_passwords(replies[1]) is None
