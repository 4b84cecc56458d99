"""The Dockerfile, built and run: `binlog-mirror --version`, then `binlog-mirror run` against the
test stack until /health/ready, as a Kubernetes probe would see it.

No Docker engine here: buildah builds (vfs storage, chroot isolation, as root) from a Debian
base image that mmdebstrap makes from Debian's packages, so no registry is needed. Both come
from apt (`.ci/run` and `make system-packages` install them); without them the test skips.
The base tarball and the image storage live under BINLOG_MIRROR_IMAGE_CACHE (default
/var/tmp/binlog-mirror-image), outside the repository: reruns skip the debootstrap (about 3 min)
and keep only the base image between runs. pip downloads the dependencies on each build (a
`--volume` on pip's cache directory stayed empty with buildah 1.28's bud). The test builds the
pure-Python image (COMPILE=0) to stay lean; BINLOG_MIRROR_IMAGE_COMPILE=1 builds the compiled
default (19.5 min measured on 2 busy cores, cold).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import redis as redis_sync

from service.devtools.stack import LocalStack
from service.sink.keys import KeyLayout

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("BINLOG_MIRROR_IMAGE_CACHE", "/var/tmp/binlog-mirror-image"))
SUITE = "bookworm"
# What the base needs: python3 + venv for the build and the runtime, CA certificates for TLS.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
COMPILE = os.environ.get("BINLOG_MIRROR_IMAGE_COMPILE", "0")
IMAGE = "localhost/binlog-mirror:test"
TOKEN = "image-test-token"

_missing = [tool for tool in ("buildah", "mmdebstrap") if shutil.which(tool) is None]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.image,
    pytest.mark.skipif(
        bool(_missing),
        reason=f"{' and '.join(_missing)} not installed (apt-get install buildah mmdebstrap)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah (vfs, chroot isolation) needs root"),
]


# buildah with the test's own image store (vfs: no overlay mounts needed)
BUILDAH = ["buildah", "--storage-driver", "vfs"]
BUILDAH += ["--root", str(CACHE / "storage"), "--runroot", str(CACHE / "run")]


def buildah(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [*BUILDAH, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command[:8])}... exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result


@pytest.fixture(scope="module")
def base_image() -> str:
    """localhost/binlog-mirror-base:<tag>: Debian minbase + BASE_PACKAGES, made once and cached."""
    tag = hashlib.sha256(" ".join((SUITE, *BASE_PACKAGES)).encode()).hexdigest()[:12]
    name = f"localhost/binlog-mirror-base:{SUITE}-{tag}"
    CACHE.mkdir(parents=True, exist_ok=True)
    if buildah("images", "--quiet", name, check=False).stdout.strip():
        return name
    tarball = CACHE / f"base-{SUITE}-{tag}.tar"
    if not tarball.exists():
        partial = tarball.with_suffix(".partial")
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--format=tar",
                SUITE,
                str(partial),
            ],
            check=True,
            capture_output=True,
            timeout=1200,
        )
        partial.rename(tarball)
    container = buildah("from", "scratch").stdout.strip()
    try:
        buildah("add", container, str(tarball), "/")
        buildah("commit", "--quiet", container, name)
    finally:
        buildah("rm", container, check=False)
    return name


@pytest.fixture(scope="module")
def image(base_image: str) -> Iterator[str]:
    """The Dockerfile's default target, built from the local base (one build per session)."""
    # The host's trust store (and a pip.conf pointing pip at it), so a TLS-inspecting proxy that
    # the host trusts works inside the build too.
    pip_conf = CACHE / "pip.conf"
    pip_conf.write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    volumes = ["--volume", f"{pip_conf}:/etc/pip.conf:ro"]
    host_cas = Path("/etc/ssl/certs/ca-certificates.crt")
    if host_cas.exists():
        volumes += ["--volume", f"{host_cas}:{host_cas}:ro"]
    buildah(
        "bud",
        "--isolation",
        "chroot",
        "--network",
        "host",
        "--pull-never",
        "--build-arg",
        f"BASE={base_image}",
        "--build-arg",
        f"COMPILE={COMPILE}",
        *volumes,
        "--tag",
        IMAGE,
        "--file",
        str(ROOT / "Dockerfile"),
        str(ROOT),
        timeout=2400,
    )
    try:
        yield IMAGE
    finally:
        buildah("rmi", "--force", IMAGE, check=False)


@pytest.fixture
def container(image: str) -> Iterator[str]:
    name = buildah("from", "--pull-never", "--name", f"bm-{uuid.uuid4().hex[:8]}", image).stdout.strip()
    try:
        yield name
    finally:
        buildah("rm", name, check=False)


def run_args(container: str, *command: str, env: dict[str, str] | None = None) -> list[str]:
    flags = [arg for k, v in (env or {}).items() for arg in ("--env", f"{k}={v}")]
    return [
        "run",
        "--isolation",
        "chroot",
        "--network",
        "host",
        *flags,
        container,
        "--",
        *command,
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.timeout(3000)
def test_image_runs_as_a_numeric_user_and_prints_its_version(container: str) -> None:
    out = buildah(*run_args(container, "binlog-mirror", "--version")).stdout
    assert out.strip().startswith(f"binlog-mirror {version('binlog-mirror')} (")
    assert buildah(*run_args(container, "id", "-u")).stdout.strip() == "10001"
    config = buildah("inspect", "--format", "{{.OCIv1.Config.User}}", IMAGE).stdout.strip()
    assert config == "10001:0"
    missing = buildah(*run_args(container, "binlog-mirror", "run"), check=False)
    assert missing.returncode != 0
    assert "BINLOG_MIRROR_MYSQL and BINLOG_MIRROR_REDIS" in missing.stdout + missing.stderr


@pytest.mark.timeout(3000)
def test_image_mirrors_the_stack_and_turns_ready(container: str, stack: LocalStack) -> None:
    info = stack.load()
    assert info is not None
    db = f"img_{uuid.uuid4().hex[:8]}"
    with stack.root_connection() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20))")
    port = free_port()
    env = {
        "BINLOG_MIRROR_MYSQL": info.mysql_url,
        "BINLOG_MIRROR_REDIS": info.redis_url,
        "BINLOG_MIRROR_TABLES": f"{db}.*",
        "BINLOG_MIRROR_KEY_PREFIX": db,
        "BINLOG_MIRROR_SERVER_ID": "4777",
        "BINLOG_MIRROR_API_HOST": "127.0.0.1",
        "BINLOG_MIRROR_API_PORT": str(port),
        "BINLOG_MIRROR_API_TOKEN": TOKEN,
        "BINLOG_MIRROR_HEARTBEAT_SECONDS": "1",
    }
    command = [*BUILDAH, *run_args(container, "binlog-mirror", "run", env=env)]
    marker = f"BINLOG_MIRROR_API_PORT={port}".encode()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    api = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=api, timeout=5) as http:
            # streaming from "now" (the first start's default): write once the stream is up
            up = {"lag unknown (nothing applied yet)"}
            wait_for(
                lambda: (reasons := _reasons(http)) is not None and set(reasons) <= up, proc, marker, 180
            )
            with stack.root_connection() as conn, conn.cursor() as cur:
                cur.execute(f"INSERT INTO {db}.t VALUES (1, 'from-the-image')")
            # The probe needs no token: Kubernetes and compose call it bare.
            wait_for(lambda: _status(http, "/health/ready") == 200, proc, marker, 120)
            assert http.get("/position").status_code == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert http.get("/position", headers=auth).status_code == 200
            assert "binlog_mirror_ready 1.0" in http.get("/metrics", headers=auth).text
        r = redis_sync.Redis.from_url(info.redis_url, decode_responses=True)
        try:
            assert r.hget(KeyLayout(prefix=db).row_key(db, "t", [1]), "v") == "from-the-image"
        finally:
            r.close()
    finally:
        stop(proc, marker)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert "SIGTERM received" in out


def stop(proc: subprocess.Popen[str], marker: bytes) -> None:
    """SIGTERM to `binlog-mirror run` itself, as a container runtime sends it on stop (buildah's
    chroot isolation does not forward signals: it kills its child). The process is the one whose
    environment holds `marker`."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                cmdline = (environ.parent / "cmdline").read_bytes()
                if b"binlog-mirror\0run" in cmdline:
                    found.append(int(environ.parent.name))
        except OSError:
            continue
    for pid in found or [proc.pid]:
        os.kill(pid, signal.SIGTERM)


def wait_for(ready: Callable[[], object], proc: subprocess.Popen[str], marker: bytes, seconds: float) -> None:
    """Poll `ready` until truthy; fail with the container's output if it exits or time runs out."""
    deadline = time.monotonic() + seconds
    while not ready():
        if proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            continue
        stop(proc, marker)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"not ready after {seconds:g} s (exit {proc.returncode}): {ready!r}\n{out[-4000:]}")


def _reasons(http: httpx.Client) -> list[str] | None:
    try:
        reasons: list[str] = http.get("/health/ready").json()["reasons"]
    except httpx.TransportError:
        return None
    return reasons


def _status(http: httpx.Client, path: str) -> int:
    try:
        return http.get(path).status_code
    except httpx.TransportError:
        return 0
