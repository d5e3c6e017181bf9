"""The on-disk caches can't be turned against their user (issue #23).

Loading a cache entry runs code (pickles, generated source, shared libraries), so entries in
a folder someone else owns or can write are not loaded; damaged entries of every kind are
rebuilt, never loaded; a shared cache is read only when the user says so, and only entries
signed with the user's key; a shared Redis cache falls back to the local one when it goes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch

import torchkiln
from torchkiln import cache_remote, cache_trust
from torchkiln.cache_remote import REDIS_ENV
from torchkiln.cache_seal import seal
from torchkiln.cache_trust import KEY_ENV, TRUST_ENV, CacheTrustWarning
from torchkiln_inductor import cpp_build

TARGET = "kiln_cache_target"
TARGET_SOURCE = """
import torch

def mlp(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1)

def other(x, w):
    return torch.tanh(x @ w) * 2
"""

PLANTED_LIBRARY = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char* path = getenv("KILN_PLANT_MARKER");
    FILE* f = path ? fopen(path, "w") : NULL;
    if (f) fclose(f);
}
"""


class Plant:
    """Unpickling it runs code: it creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def _isolate(mp: pytest.MonkeyPatch, root: Path) -> None:
    """A cache at ``root``, private settings, and nothing compiled or warned in memory."""
    mp.setenv("TORCHKILN_CACHE_DIR", str(root))
    for var in (TRUST_ENV, KEY_ENV, REDIS_ENV, "TORCHKILN_PERSIST_CAPTURES"):
        mp.delenv(var, raising=False)
    mp.setattr(torchkiln.config, "persist_captures", True)
    mp.setattr(cpp_build, "_loaded", {})
    mp.setattr(cache_trust, "_warned", set())
    mp.setattr(cache_remote, "_dropped", set())
    mp.setattr(cache_remote, "_clients", {})
    torchkiln.reset()


def fresh_process() -> None:
    """What a new process starts with: nothing compiled in memory, only the caches."""
    torchkiln.reset()
    cpp_build._loaded.clear()


def compile_and_check(fn, backend: str = "inductor") -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    torch.testing.assert_close(torchkiln.compile(fn, backend=backend)(x, w), fn(x, w))


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def loads() -> dict[str, int]:
    return {k: torchkiln.counters[k]["hits"] for k in ("capture_cache", "aot_cache")}


def plant(root: Path, marker: Path, library: bytes, key: bytes | None = None) -> None:
    """Replace every entry by code that creates ``marker`` when loaded, sealed as a whole
    entry: anyone can compute a checksum, only a key's holder can sign."""
    for path in entries(root):
        payload = library if path.suffix == ".so" else pickle.dumps(Plant(marker))
        path.write_bytes(seal(path.relative_to(root).as_posix(), payload, key))


def write_key(path: Path, key: bytes) -> Path:
    path.write_bytes(key)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A module both this process and child processes import from the same file."""
    folder = tmp_path_factory.mktemp("target")
    (folder / f"{TARGET}.py").write_text(TARGET_SOURCE)
    spec = importlib.util.spec_from_file_location(TARGET, folder / f"{TARGET}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[TARGET] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[TARGET]


@pytest.fixture(scope="module")
def golden(target, tmp_path_factory) -> Path:
    """A cache holding an entry of every kind (capture, plan, library) for ``target.mlp``."""
    root = tmp_path_factory.mktemp("golden") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        _isolate(mp, root)
        compile_and_check(target.mlp)
    assert {p.relative_to(root).parts[0] for p in entries(root)} == {"capture", "aot", "cpp"}
    return root


@pytest.fixture
def cache(golden, tmp_path, monkeypatch) -> Path:
    """A copy of the golden cache (modes kept), used by this test alone."""
    root = tmp_path / "cache"
    shutil.copytree(golden, root)
    _isolate(monkeypatch, root)
    return root


@pytest.fixture(scope="module")
def planted_library(tmp_path_factory) -> bytes:
    """A shared library whose constructor creates ``$KILN_PLANT_MARKER``."""
    folder = tmp_path_factory.mktemp("planted")
    (folder / "planted.c").write_text(PLANTED_LIBRARY)
    cmd = ["cc", "-shared", "-fPIC", str(folder / "planted.c"), "-o", str(folder / "p.so")]
    subprocess.run(cmd, check=True)
    return (folder / "p.so").read_bytes()


def test_cache_folders_are_private_and_entries_readable_by_their_owner_only(golden):
    folders = [golden, *(p for p in golden.rglob("*") if p.is_dir())]
    assert {oct(p.stat().st_mode & 0o777) for p in folders} == {"0o700"}
    assert {oct(p.stat().st_mode & 0o777) for p in entries(golden)} == {"0o600"}


@pytest.mark.parametrize("opened", ["root", "folders", "entries"])
def test_planted_entries_where_others_can_write_are_not_loaded(
    cache, target, planted_library, tmp_path, monkeypatch, opened
):
    """As a cache made beforehand on a shared ``/tmp`` path: anyone could have planted them."""
    marker = tmp_path / "planted-code-ran"
    monkeypatch.setenv("KILN_PLANT_MARKER", str(marker))
    plant(cache, marker, planted_library)
    where = {"root": [cache], "folders": [cache / k for k in ("capture", "aot", "cpp")]}
    for path in where.get(opened, entries(cache)):
        path.chmod(0o777 if path.is_dir() else 0o666)
    fresh_process()
    with pytest.warns(CacheTrustWarning, match="is writable by group or others") as warned:
        compile_and_check(target.mlp)
    assert not marker.exists()
    assert loads() == {"capture_cache": 0, "aot_cache": 0}
    named = str(where.get(opened, entries(cache))[0])
    assert any(named in str(w.message) and "Fix:" in str(w.message) for w in warned)


def test_a_refused_cache_is_left_as_it_was(target, tmp_path, monkeypatch):
    """Nothing is written into a cache folder others can write: not entries, not folders."""
    root = tmp_path / "shared-tmp"
    root.mkdir(mode=0o777)
    root.chmod(0o777)
    _isolate(monkeypatch, root)
    with pytest.warns(CacheTrustWarning, match="is writable by group or others"):
        compile_and_check(target.other)
    assert list(root.iterdir()) == []


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to write a cache as another user (nobody)",
)
def test_a_cache_another_user_made_is_not_loaded(cache, target, planted_library, monkeypatch):
    nobody = pwd.getpwnam("nobody")
    staging = Path(tempfile.mkdtemp(prefix="kiln-other-user-"))  # /tmp: nobody can reach it
    try:
        staging.chmod(0o1777)
        marker = staging / "planted-code-ran"
        monkeypatch.setenv("KILN_PLANT_MARKER", str(marker))
        plant(cache, marker, planted_library)
        planted = staging / "planted"
        shutil.copytree(cache, planted)
        subprocess.run(["chmod", "-R", "a+rX", str(planted)], check=True)
        theirs = staging / "theirs"  # made by nobody, writable by nobody else
        as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
        subprocess.run([*as_nobody, "--clear-groups", "cp", "-r", planted, theirs], check=True)
        assert theirs.stat().st_uid == nobody.pw_uid and not theirs.stat().st_mode & 0o022
        monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(theirs))
        fresh_process()
        with pytest.warns(CacheTrustWarning, match=f"{theirs}: it is owned by uid {nobody.pw_uid}"):
            compile_and_check(target.mlp)
        assert not marker.exists()
        assert loads() == {"capture_cache": 0, "aot_cache": 0}
    finally:
        shutil.rmtree(staging)


DAMAGE_SCRIPT = textwrap.dedent(
    """
    import os, torch, torchkiln
    from pathlib import Path
    from torchkiln.disk_cache import read_entry
    from torchkiln_inductor import cpp_build
    import kiln_cache_target as target

    root = Path(os.environ["TORCHKILN_CACHE_DIR"])
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    damages = {
        "truncated": lambda data: data[: len(data) // 2],
        "zero-filled": lambda data: bytes(len(data)),
        "random": lambda data: os.urandom(len(data)),
    }
    for damage in damages.values():
        for path in paths:
            path.write_bytes(damage(path.read_bytes()))
        torchkiln.reset()
        cpp_build._loaded.clear()
        x, w = torch.randn(8, 16), torch.randn(16, 4)
        torch.testing.assert_close(torchkiln.compile(target.mlp)(x, w), target.mlp(x, w))
        assert all(read_entry(path) is not None for path in paths)  # rebuilt
    print(len(paths))
    """
)


def child_env(target, root: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(root), **extra)
    env.pop("TORCHKILN_PERSIST_CAPTURES", None)
    folder = os.path.dirname(target.__file__)
    env["PYTHONPATH"] = os.pathsep.join([folder, env.get("PYTHONPATH", "")])
    return env


def test_damaged_entries_of_every_kind_are_rebuilt_in_a_new_process(cache, target):
    """Truncated, zero-filled and random: a loaded damaged library would kill the process."""
    done = subprocess.run(
        [sys.executable, "-c", DAMAGE_SCRIPT],
        env=child_env(target, cache),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["3"]


def test_a_shared_cache_loads_entries_signed_with_the_key_and_no_others(
    target, planted_library, tmp_path, monkeypatch
):
    shared = tmp_path / "shared"  # a folder the team, and so others, can write
    shared.mkdir()
    shared.chmod(0o777)
    _isolate(monkeypatch, shared)
    monkeypatch.setenv(TRUST_ENV, "shared")
    monkeypatch.setenv(
        KEY_ENV, str(write_key(tmp_path / "team.key", os.urandom(32).hex().encode()))
    )
    compile_and_check(target.mlp)
    fresh_process()
    compile_and_check(target.mlp)
    assert loads() == {"capture_cache": 1, "aot_cache": 1}

    marker = tmp_path / "planted-code-ran"
    monkeypatch.setenv("KILN_PLANT_MARKER", str(marker))
    plant(shared, marker, planted_library, key=b"someone else's key, not the team's")
    fresh_process()
    with pytest.warns(CacheTrustWarning, match=f"not signed with the key in {KEY_ENV}"):
        compile_and_check(target.mlp)
    assert not marker.exists()
    assert loads() == {"capture_cache": 0, "aot_cache": 0}


def test_private_entries_are_not_loaded_under_a_key_they_are_not_signed_with(
    cache, target, tmp_path, monkeypatch
):
    monkeypatch.setenv(TRUST_ENV, "shared")
    monkeypatch.setenv(KEY_ENV, str(write_key(tmp_path / "key", b"k" * 32)))
    fresh_process()
    with pytest.warns(CacheTrustWarning, match="not signed"):
        compile_and_check(target.mlp)
    assert loads() == {"capture_cache": 0, "aot_cache": 0}


def _bad_key(tmp_path: Path, kind: str) -> str:
    path = tmp_path / "key"
    if kind != "missing":
        write_key(path, b"short" if kind == "short" else b"k" * 32)
    if kind == "writable":
        path.chmod(0o666)
    return str(path)


@pytest.mark.parametrize(
    "trust, key, message",
    [
        ("team", None, "TORCHKILN_CACHE_TRUST='team' is not 'private' or 'shared'"),
        ("shared", None, "TORCHKILN_CACHE_TRUST=shared needs TORCHKILN_CACHE_KEY_FILE"),
        ("shared", "missing", "cannot read TORCHKILN_CACHE_KEY_FILE="),
        ("shared", "short", "holds fewer than 16 bytes"),
        ("shared", "writable", "is writable by group or others"),
    ],
)
def test_unusable_trust_settings_warn_and_compile_without_the_cache(
    cache, target, tmp_path, monkeypatch, trust, key, message
):
    monkeypatch.setenv(TRUST_ENV, trust)
    if key is not None:
        monkeypatch.setenv(KEY_ENV, _bad_key(tmp_path, key))
    before = {p: p.read_bytes() for p in entries(cache)}
    fresh_process()
    with pytest.warns(CacheTrustWarning, match=message):
        compile_and_check(target.mlp, backend="eager")
    assert dict(torchkiln.counters["capture_cache"]) == {"misses": 1}
    assert {p: p.read_bytes() for p in entries(cache)} == before


@pytest.fixture
def redis_server(tmp_path):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    redis = pytest.importorskip("redis", reason="pip install 'torchkiln[redis]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield url, server, client
    server.kill()
    server.wait()


REDIS_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, socket, time, torch, torchkiln
    from torchkiln_inductor import cpp_build
    import kiln_cache_target as target

    builds = []
    build = cpp_build._build
    cpp_build._build = lambda *a: (builds.append(a[1]), build(*a))

    def run(fn):
        builds.clear()
        torchkiln.reset()
        x, w = torch.randn(8, 16), torch.randn(16, 4)
        torch.testing.assert_close(torchkiln.compile(fn)(x, w), fn(x, w))
        return {
            "builds": len(builds),
            **{k: dict(torchkiln.counters[k]) for k in ("capture_cache", "aot_cache")},
        }

    first = run(target.mlp)
    os.kill(int(os.environ["KILN_REDIS_PID"]), signal.SIGTERM)
    port = int(os.environ["TORCHKILN_CACHE_REDIS"].rsplit(":", 1)[1].split("/")[0])
    while True:  # until the server is gone
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(0.05)
        except OSError:
            break
    print(json.dumps({"first": first, "after_stop": run(target.other)}))
    """
)


def test_a_redis_cache_is_shared_between_processes_and_survives_the_server_stopping(
    target, redis_server, tmp_path, monkeypatch
):
    url, server, client = redis_server
    key = write_key(tmp_path / "team.key", os.urandom(32).hex().encode())
    _isolate(monkeypatch, tmp_path / "mine")
    for var, value in ((TRUST_ENV, "shared"), (KEY_ENV, str(key)), (REDIS_ENV, url)):
        monkeypatch.setenv(var, value)
    compile_and_check(target.mlp)
    stored = {k.decode().split(":")[1].split("/")[0] for k in client.keys("torchkiln:*")}
    assert stored == {"capture", "aot", "cpp"}

    # another machine: an empty local cache; the server stops between two compiles
    env = child_env(target, tmp_path / "theirs", KILN_REDIS_PID=str(server.pid))
    done = subprocess.run(
        [sys.executable, "-c", REDIS_SCRIPT], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["first"] == {"builds": 0, "capture_cache": {"hits": 1}, "aot_cache": {"hits": 1}}
    assert report["after_stop"]["builds"] == 1
    assert report["after_stop"]["capture_cache"] == {"misses": 1, "stores": 1}
    assert f"the remote cache {url} failed" in done.stderr
    assert (tmp_path / "theirs" / "cpp").is_dir()  # kept locally all along
