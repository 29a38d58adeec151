"""The operator image itself, run with podman (no Kubernetes): the image scripts/build-image
builds from the Dockerfile on a Debian python3 base. It runs as uid 65532 on a read-only root
filesystem with a tmpfs on /tmp only, its entrypoint is `ordo operator`, every ordo module
imports, `ordo run` works, nothing outside /tmp is writable, and it carries no installer or
compiler."""

from __future__ import annotations

import json
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
from tests.support.image import IMAGE, ROOT, ordo_image_archive, podman, podman_run

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
UID = 65532


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module", autouse=True)
def archive() -> Path:
    """Build (or find up to date) the image; podman's storage then holds localhost/ordo:dev."""
    return ordo_image_archive()


def test_archive_names_the_image_for_containerd(archive: Path) -> None:
    assert archive == ROOT / ".cache" / "image" / f"ordo-{VERSION}.oci.tar"
    with tarfile.open(archive) as tar:
        layout = tar.extractfile("oci-layout")
        index_file = tar.extractfile("index.json")
        assert layout is not None and index_file is not None
        assert json.load(layout)["imageLayoutVersion"] == "1.0.0"
        index = json.load(index_file)
        manifests = index["manifests"]
        names = [m["annotations"]["io.containerd.image.name"] for m in manifests]
        assert names == [IMAGE, f"localhost/ordo:{VERSION}"]
        assert len({m["digest"] for m in manifests}) == 1, "both names are the same image"
        blob = tar.extractfile(f"blobs/sha256/{manifests[0]['digest'].removeprefix('sha256:')}")
        assert blob is not None
        manifest = json.load(blob)
    # The archive holds the image podman has as localhost/ordo:dev (its id is the config digest).
    image_id = _ok(podman("image", "inspect", "--format", "{{.Id}}", IMAGE)).strip()
    assert manifest["config"]["digest"] == f"sha256:{image_id}"


def test_image_config_user_entrypoint_and_ports() -> None:
    config = json.loads(_ok(podman("image", "inspect", "--format", "{{json .Config}}", IMAGE)))
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["/opt/ordo/bin/ordo", "operator"]
    assert not config.get("Cmd")
    assert set(config["ExposedPorts"]) == {"8080/tcp", "8081/tcp"}
    env = dict(item.partition("=")[::2] for item in config["Env"])
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_runs_as_uid_65532_on_a_read_only_root() -> None:
    out = _ok(podman_run("-c", "id -u; id -g; id -G", entrypoint="/bin/sh"))
    assert out.split() == [str(UID)] * 3


def test_entrypoint_is_ordo_operator() -> None:
    out = _ok(podman_run("--help"))
    assert out.startswith("usage: ordo operator"), out[:200]
    for flag in ("--all-namespaces", "--max-concurrent-tasks", "--health-port"):
        assert flag in out


def test_ordo_version() -> None:
    assert _ok(podman_run("--version", entrypoint="ordo")).strip() == f"ordo {VERSION}"


def test_every_ordo_module_imports() -> None:
    """Catches a dependency missing from the image (pip and setuptools are removed)."""
    script = (
        "import importlib, pkgutil, ordo\n"
        "names = [m.name for m in pkgutil.walk_packages(ordo.__path__, 'ordo.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    count = int(_ok(podman_run("-c", script, entrypoint="python3")).strip())
    local = sum(1 for _ in (ROOT / "controller" / "ordo").rglob("*.py"))
    assert count == local - 1  # every module but ordo/__init__.py itself


def test_ordo_run_quickstart_in_the_image() -> None:
    examples = ROOT / "examples" / "quickstart"
    result = podman_run(
        "run",
        "-f",
        "/examples/quickstart",
        "-o",
        "json",
        "--quiet",
        entrypoint="ordo",
        options=["--volume", f"{examples}:/examples/quickstart:ro"],
    )
    out = _ok(result)
    tasks = json.loads(out)
    tasks = tasks if isinstance(tasks, list) else [tasks]
    assert tasks and all(t["status"]["phase"] == "Succeeded" for t in tasks), out[:2000]


_WRITABLE = """
import json, os, stat
skip = ("/proc", "/sys", "/dev", "/tmp")
found = []
for top, dirs, files in os.walk("/"):
    dirs[:] = [
        d for d in dirs
        if os.path.join(top, d) not in skip and not os.path.islink(os.path.join(top, d))
    ]
    for path in [top, *(os.path.join(top, f) for f in files)]:
        if not os.path.islink(path) and os.access(path, os.W_OK):
            mode = os.lstat(path).st_mode
            found.append([path, stat.S_ISDIR(mode) and mode & 0o1777 == 0o1777])
probe = []
for directory in ("/", "/opt/ordo", "/opt/ordo/bin", "/etc", "/var/tmp", "/tmp"):
    try:
        with open(os.path.join(directory, ".ordo-probe"), "w") as handle:
            handle.write("x")
        probe.append(directory)
    except OSError:
        pass
print(json.dumps({"writable": found, "probe": probe}))
"""


def test_nothing_writable_outside_tmp_on_a_read_only_root() -> None:
    report = json.loads(_ok(podman_run("-c", _WRITABLE, entrypoint="python3")))
    assert report["writable"] == []
    assert report["probe"] == ["/tmp"]


def test_the_image_user_owns_nothing_in_the_image() -> None:
    """Even on a writable root, uid 65532 can write only the standard sticky world-writable
    directories (/var/tmp, /run/lock): the virtualenv, /etc and /usr are root's."""
    report = json.loads(_ok(podman_run("-c", _WRITABLE, entrypoint="python3", read_only=False)))
    assert report["writable"], "the walk found nothing at all"
    not_sticky = [path for path, sticky in report["writable"] if not sticky]
    assert not_sticky == []
    assert "/opt/ordo" not in report["probe"] and "/etc" not in report["probe"]


def test_no_installer_or_compiler_in_the_image() -> None:
    script = (
        "for tool in pip pip3 pip3.11 gcc cc c++ g++ clang make; do "
        'command -v "$tool"; done; '
        "python3 -m pip --version 2>/dev/null; /opt/ordo/bin/python -m pip --version 2>/dev/null; "
        "exit 0"
    )
    assert _ok(podman_run("-c", script, entrypoint="/bin/sh")).strip() == ""
    listing = _ok(podman_run("/opt/ordo/bin", entrypoint="ls")).split()
    assert not [name for name in listing if name.startswith(("pip", "easy_install"))], listing


def _build_image() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "build-image")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=1800,
    )


def test_build_is_a_no_op_when_nothing_changed(archive: Path) -> None:
    first = _build_image()  # up to date, or a rebuild after an edit since the fixture ran
    assert first.returncode == 0, first.stderr
    second = _build_image()
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == str(archive)
    assert "up to date" in second.stderr, f"rebuilt with unchanged inputs:\n{second.stderr}"
    assert "podman build" not in second.stderr
