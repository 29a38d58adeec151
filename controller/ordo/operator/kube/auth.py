"""Logging in to the Kubernetes API: in-cluster ServiceAccount or kubeconfig, through kopf's
login helpers, and the TLS context for the client."""

from __future__ import annotations

import base64
import dataclasses
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import kopf
import yaml


class KubeconfigError(Exception):
    """The kubeconfig cannot give a connection (missing context, unreadable file, a
    credential plugin ordo does not run); the message says which."""


def ssl_context(info: kopf.ConnectionInfo, keep: list[Any]) -> ssl.SSLContext | bool:
    if info.insecure:
        return False
    ctx = ssl.create_default_context()
    if info.ca_path:
        ctx.load_verify_locations(cafile=str(info.ca_path))
    elif info.ca_data:
        data = info.ca_data
        text = data.decode() if isinstance(data, bytes) else data
        if "BEGIN CERTIFICATE" not in text:
            text = base64.b64decode(text).decode()
        ctx.load_verify_locations(cadata=text)
    cert = info.certificate_path
    key = info.private_key_path
    if info.certificate_data and info.private_key_data:
        cert = _tempfile(info.certificate_data, keep)
        key = _tempfile(info.private_key_data, keep)
    if cert and key:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _tempfile(data: str | bytes, keep: list[Any]) -> str:
    raw = data if isinstance(data, bytes) else data.encode()
    if b"-----BEGIN" not in raw:
        raw = base64.b64decode(raw)
    handle = tempfile.NamedTemporaryFile(prefix="ordo-", suffix=".pem")  # noqa: SIM115
    handle.write(raw)
    handle.flush()
    keep.append(handle)
    return handle.name


def login() -> kopf.ConnectionInfo:
    """In-cluster service account if present, else the kubeconfig (KUBECONFIG).

    In-cluster, the API server is where `KUBERNETES_SERVICE_HOST`/`_PORT` say, as in
    client-go's in-cluster config; kopf's own default, `kubernetes.default.svc`, needs cluster
    DNS, which a pod without DNS (or with its own resolver) does not have."""
    settings = kopf.OperatorSettings()
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists():
        info = kopf.login_with_service_account(settings=settings)
        if info is not None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
            if host and port:
                host = f"[{host}]" if ":" in host else host
                info = dataclasses.replace(info, server=f"https://{host}:{port}")
            return info
    info = kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise kopf.LoginError("no kubeconfig and no in-cluster service account found")
    return info


# -- kubeconfig contexts (for `ordo invoke`, which may pick one) -------------------------

_FILE_KEYS = ("certificate-authority", "client-certificate", "client-key")


def kubeconfig_login(files: list[Path], context: str | None) -> kopf.ConnectionInfo:
    """Connection info of `context` (default: current-context) merged from kubeconfig `files`
    as kubectl merges them (the first file that sets a name wins); relative certificate paths
    are relative to the file that names them. Tokens, client certificates and basic auth only
    (no exec or auth-provider plugins)."""
    current: str | None = None
    sections: dict[str, dict[str, dict[str, Any]]] = {"contexts": {}, "clusters": {}, "users": {}}
    for file in files:
        try:
            config = yaml.safe_load(file.read_text()) or {}
        except OSError as exc:
            raise KubeconfigError(f"cannot read kubeconfig {file}: {exc.strerror}") from None
        except yaml.YAMLError:
            raise KubeconfigError(f"kubeconfig {file} is not valid YAML") from None
        if not isinstance(config, dict):
            raise KubeconfigError(f"kubeconfig {file} is not a mapping")
        current = current or config.get("current-context") or None
        for section, inner in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in config.get(section) or []:
                if not isinstance(item, dict) or item.get("name") in sections[section]:
                    continue
                body = dict(item.get(inner) or {})
                for key in _FILE_KEYS:
                    if isinstance(body.get(key), str):
                        body[key] = str(file.parent / os.path.expanduser(body[key]))
                sections[section][str(item.get("name"))] = body
    name = context or current
    if not name:
        raise KubeconfigError("no current-context in the kubeconfig: pass --context")
    ctx = sections["contexts"].get(name)
    if ctx is None:
        raise KubeconfigError(f"context {name!r} not found in the kubeconfig")
    cluster = sections["clusters"].get(str(ctx.get("cluster")))
    if cluster is None or not cluster.get("server"):
        raise KubeconfigError(f"context {name!r}: cluster {ctx.get('cluster')!r} has no server")
    user = sections["users"].get(str(ctx.get("user")), {})
    token = user.get("token") or (user.get("auth-provider") or {}).get("config", {}).get(
        "access-token"
    )
    if not token and user.get("tokenFile"):
        try:
            token = Path(user["tokenFile"]).read_text().strip()
        except OSError as exc:
            raise KubeconfigError(f"cannot read tokenFile: {exc.strerror}") from None
    if user.get("exec") and not token:
        raise KubeconfigError(
            f"context {name!r} uses an exec credential plugin, which ordo does not run: "
            "use a kubeconfig with a token or a client certificate"
        )
    return kopf.ConnectionInfo(
        server=str(cluster["server"]),
        ca_path=cluster.get("certificate-authority"),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=cluster.get("insecure-skip-tls-verify"),
        certificate_path=user.get("client-certificate"),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=user.get("client-key"),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        token=token,
        default_namespace=ctx.get("namespace"),
    )


def connect(kubeconfig: str | None, context: str | None) -> kopf.ConnectionInfo:
    """--kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster account."""
    spec = kubeconfig or os.environ.get("KUBECONFIG", "")
    files = [Path(os.path.expanduser(p)) for p in spec.split(os.pathsep) if p.strip()]
    if not files and Path("~/.kube/config").expanduser().exists():
        files = [Path("~/.kube/config").expanduser()]
    if files:
        return kubeconfig_login(files, context)
    if context:
        raise KubeconfigError("--context needs a kubeconfig (--kubeconfig or $KUBECONFIG)")
    try:
        return login()
    except kopf.LoginError:
        raise KubeconfigError(
            "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod"
        ) from None
