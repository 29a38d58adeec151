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
