"""Fixtures for tests against a real kube-apiserver + etcd on loopback.

Every test under ``tests/cluster`` is marked ``cluster`` automatically (``scripts/test --quick``
and ``pytest -m "not cluster"`` leave them out). The control plane is built once with
``scripts/build-controlplane``; without it these tests fail when ``CI`` is set and are skipped
otherwise, saying so.

Fixtures
--------
``control_plane`` (session)
    A started :class:`ordo_devcluster.ControlPlane` with the CRDs from ``crds/`` installed
    (when that directory has manifests) and Established. Useful attributes and methods:

    * ``control_plane.kubeconfig``: admin kubeconfig path (``system:masters``)
    * ``control_plane.server``: ``https://127.0.0.1:<port>``
    * ``control_plane.binaries``: directory of the pinned ``kubectl``/``kube-apiserver``/``etcd``
    * ``control_plane.kubectl(*args, check=True, input=None)``: ``CompletedProcess[str]``;
      raises ``KubectlError`` (stderr in the message) on failure when ``check``
    * ``control_plane.create_namespace(prefix="test")``: a new uniquely named namespace
    * ``control_plane.apply_crds(path)``: server-side apply a directory, wait for Established
    * ``control_plane.env()``: environment with ``KUBECONFIG`` set, for subprocesses such as
      ``ordo operator`` (kopf reads ``KUBECONFIG``)
    * ``control_plane.request("/readyz")``: ``(status, body)`` of a GET as admin

``namespace`` (function)
    The name of a fresh namespace for this test. Namespaces are never deleted: without
    kube-controller-manager they would stay ``Terminating`` forever, so each test gets a
    new one instead of cleaning up.

``kubectl`` (function)
    ``control_plane.kubectl``, for brevity: ``kubectl("get", "pods", "-n", namespace)``.

``control_plane_factory`` (function)
    ``control_plane_factory(**kwargs)`` returns a new, not yet started ``ControlPlane`` (same
    fail/skip rule when the binaries are missing), for tests that need their own cluster;
    use it as a context manager. Starting one takes a few seconds.

``operator_factory`` (function)
    ``operator_factory(*args, **kwargs)`` starts an ``ordo operator`` for ``namespace`` (logs in
    ``tmp_path``) with extra command-line ``args`` and the keyword arguments of
    :class:`tests.support.operator.OperatorProcess` (``kubeconfig=``, ``env=``), and stops it
    after the test. Call it once per test.

``operator`` (function)
    ``operator_factory()``: an operator with the default flags.

Further ControlPlane helpers: ``service_account_kubeconfig(namespace, name)`` writes a
kubeconfig that authenticates as that ServiceAccount with a TokenRequest token (RBAC applies;
pass it as ``kubectl(..., kubeconfig=path)`` or in ``env()["KUBECONFIG"]``), and ``pids``.

What is missing (no kube-controller-manager, no kubelet): no garbage collection of
ownerReferences, no namespace deletion, no ``default`` ServiceAccount, no Deployments/Jobs/Pods
actually running. Assert on the objects and their ownerReferences instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
from tests.support.operator import OperatorProcess

from ordo_devcluster import BinariesNotFoundError, ControlPlane

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = REPO_ROOT / "crds"
_HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/cluster with ``cluster`` (before ``-m`` deselects)."""
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.cluster)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _new_control_plane(**kwargs: Any) -> ControlPlane:
    """A not-yet-started ControlPlane; fails (CI) or skips (elsewhere) if binaries are missing."""
    try:
        return ControlPlane(**kwargs)
    except BinariesNotFoundError as exc:
        if _in_ci():
            pytest.fail(f"cluster tests need the control plane binaries: {exc}", pytrace=False)
        pytest.skip(f"control plane not built (run scripts/build-controlplane): {exc}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with _new_control_plane(crds=CRDS_DIR) as cp:
        yield cp


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    return control_plane.create_namespace()


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Callable[..., CompletedProcess[str]]:
    return control_plane.kubectl


@pytest.fixture
def control_plane_factory() -> Callable[..., ControlPlane]:
    return _new_control_plane


@pytest.fixture
def operator_factory(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(*args: str, **kwargs: Any) -> OperatorProcess:
        if started:
            raise RuntimeError("operator_factory starts one operator per test")
        started.append(OperatorProcess(control_plane, namespace, tmp_path, *args, **kwargs))
        return started[0].start()

    yield start
    for op in started:
        op.stop()


@pytest.fixture
def operator(operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    return operator_factory()
