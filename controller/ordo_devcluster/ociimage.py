"""Minimal ``FROM scratch`` OCI image archives, written without podman, buildah or a registry.

An OCI image layout is a tarball holding ``oci-layout``, ``index.json`` and content-addressed
blobs (one uncompressed layer tar, the image config and the manifest). ``ctr images import``
(containerd) accepts it as it is. The archives are reproducible: fixed mtimes, uid/gid 0,
sorted entries.

Standard library only, so ``scripts/node-deps`` can run this file with any Python 3.11::

    python3 controller/ordo_devcluster/ociimage.py pause OUT.tar --binary pause
    python3 controller/ordo_devcluster/ociimage.py busybox OUT.tar --binary /bin/busybox
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BUSYBOX_IMAGE",
    "PAUSE_IMAGE",
    "FileEntry",
    "busybox_image",
    "pause_image",
    "write_oci_archive",
]

#: Names the images get in containerd (``imagePullPolicy: Never`` or ``IfNotPresent``).
PAUSE_IMAGE = "localhost/ordo-pause:dev"
BUSYBOX_IMAGE = "localhost/ordo-busybox:dev"

_MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
_MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
_MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class FileEntry:
    """One entry of the image's single layer: a file (``data``), a directory or a symlink."""

    path: str
    data: bytes | None = None
    mode: int = 0o755
    symlink_to: str | None = None
    is_dir: bool = False


@dataclass
class _Blobs:
    items: dict[str, bytes] = field(default_factory=dict)

    def add(self, data: bytes, media_type: str) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.items[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _tar_bytes(entries: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _layer(files: Sequence[FileEntry]) -> bytes:
    wanted: dict[str, FileEntry] = {}
    for entry in files:
        path = entry.path.strip("/")
        parts = path.split("/")
        for depth in range(1, len(parts)):  # parent directories first
            parent = "/".join(parts[:depth])
            wanted.setdefault(parent, FileEntry(parent, is_dir=True))
        wanted[path] = entry
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path in sorted(wanted):
        entry = wanted[path]
        if entry.is_dir:
            members.append((_info(path + "/", tarfile.DIRTYPE, entry.mode), None))
        elif entry.symlink_to is not None:
            info = _info(path, tarfile.SYMTYPE, 0o777)
            info.linkname = entry.symlink_to
            members.append((info, None))
        else:
            data = entry.data or b""
            members.append((_info(path, tarfile.REGTYPE, entry.mode, len(data)), data))
    return _tar_bytes(members)


def write_oci_archive(
    archive: Path,
    *,
    name: str,
    files: Sequence[FileEntry],
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/bin",),
) -> Path:
    """Write a single-layer OCI image archive named ``name`` (``repo:tag``) to ``archive``."""
    blobs = _Blobs()
    layer = _layer(files)
    layer_desc = blobs.add(layer, _MEDIA_LAYER)
    config = {
        "architecture": _ARCHES.get(platform.machine(), platform.machine()),
        "os": "linux",
        "config": {
            "Entrypoint": list(entrypoint) or None,
            "Cmd": list(cmd) or None,
            "Env": list(env),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
        "history": [{"created_by": "ordo_devcluster.ociimage", "created": "1970-01-01T00:00:00Z"}],
        "created": "1970-01-01T00:00:00Z",
    }
    config_desc = blobs.add(_json(config), _MEDIA_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": _MEDIA_MANIFEST,
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_desc = blobs.add(_json(manifest), _MEDIA_MANIFEST)
    tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else "latest"
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": tag,
    }
    manifest_desc["platform"] = {"architecture": config["architecture"], "os": "linux"}
    index = {"schemaVersion": 2, "mediaType": _MEDIA_INDEX, "manifests": [manifest_desc]}
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [
        (_info("blobs/", tarfile.DIRTYPE, 0o755), None),
        (_info("blobs/sha256/", tarfile.DIRTYPE, 0o755), None),
    ]
    for digest in sorted(blobs.items):
        data = blobs.items[digest]
        members.append(
            (_info(f"blobs/sha256/{digest[7:]}", tarfile.REGTYPE, 0o644, len(data)), data)
        )
    for member_name, data in (
        ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
        ("index.json", _json(index)),
    ):
        members.append((_info(member_name, tarfile.REGTYPE, 0o644, len(data)), data))
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    tmp.write_bytes(_tar_bytes(members))
    tmp.replace(archive)
    return archive


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def pause_image(archive: Path, binary: Path, *, name: str = PAUSE_IMAGE) -> Path:
    """The pod sandbox image: a static ``pause`` (from kubernetes' build/pause) as ``/pause``."""
    return write_oci_archive(
        archive,
        name=name,
        files=[FileEntry("pause", binary.read_bytes())],
        entrypoint=["/pause"],
    )


def busybox_image(archive: Path, binary: Path, *, name: str = BUSYBOX_IMAGE) -> Path:
    """A shell image: a static busybox as ``/bin/busybox`` plus a symlink for every applet,
    an empty ``/tmp`` and a minimal ``/etc/passwd``; the default command is ``sh``."""
    applets = subprocess.run(
        [str(binary), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    files = [FileEntry("bin/busybox", binary.read_bytes())]
    files += [
        FileEntry(f"bin/{applet}", symlink_to="busybox")
        for applet in applets
        if applet != "busybox"
    ]
    files += [
        FileEntry("tmp", is_dir=True, mode=0o1777),
        FileEntry("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644),
        FileEntry("etc/group", b"root:x:0:\n", mode=0o644),
        FileEntry("root", is_dir=True, mode=0o700),
    ]
    return write_oci_archive(archive, name=name, files=files, cmd=["sh"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a FROM-scratch OCI image archive")
    parser.add_argument("kind", choices=["pause", "busybox"])
    parser.add_argument("archive", type=Path)
    parser.add_argument("--binary", type=Path, required=True, help="the static binary to pack")
    parser.add_argument("--name", help="image name (default: the kind's standard name)")
    args = parser.parse_args(argv)
    build = pause_image if args.kind == "pause" else busybox_image
    default = PAUSE_IMAGE if args.kind == "pause" else BUSYBOX_IMAGE
    build(args.archive, args.binary, name=args.name or default)
    print(f"{args.archive}: {args.name or default}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
