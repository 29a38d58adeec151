"""`ordo console` in a real headless Chromium (Debian's, through its chromedriver; issue 30),
against the control plane with the operator running, in one test (one control plane, one
operator, one browser): without --namespace, the admin's console reads all namespaces, a
ServiceAccount that may list namespaces those where it may list Tasks, one that may not its
context's namespace; a request without the token is refused; the Tasks list updates live
when a Task finishes; a Task page shows its steps, a denied call and its reason, and links its
trace id to --tracing-url; the approvals inbox lists a waiting call; approving a
waiting call from the page as a ServiceAccount that may not create ToolApprovals shows the API
server's refusal, and as one that may, lets the run finish; no canary (a Secret's value, a
prompt, a tool argument `ordo approvals` does not show) appears in the pages, the live stream or
the console's output; the Tasks page says what the rules review lets each ServiceAccount do in
its namespace. It saves docs/console.md's screenshots (docs/images/console-*.png)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from tests.support.counting_tool import CountingTool
from tests.support.operator import OperatorProcess, apply, doc, wait_for, wait_task

from ordo_devcluster import ControlPlane

TRACING = "http://tracing.invalid/trace/{traceId}"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
SECRET_CANARY = "canary-secret-c0ns0le"
PROMPT_CANARY = "canary-prompt-c0ns0le"
HIDDEN_ARG_CANARY = "canary-hidden-arg-c0ns0le"
SHOWN_ARG_CANARY = (
    "canary-shown-arg-c0ns0le"  # a waiting call's argument: shown, as by `ordo approvals`
)
READ = {"apiGroups": ["ordo.dev"], "verbs": ["get", "list", "watch"]}
ROLES = {  # role -> (rules, ServiceAccounts bound); the approver is a viewer who may also approve
    "viewer": (
        [
            {**READ, "resources": ["tasks", "agents", "agentpolicies", "toolapprovals"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ],
        ["viewer", "approver", "lister"],
    ),
    "approver": (
        [{"apiGroups": ["ordo.dev"], "resources": ["toolapprovals"], "verbs": ["create"]}],
        ["approver"],
    ),
}


def grant(cp: ControlPlane, ns: str) -> None:
    rbac = "rbac.authorization.k8s.io"
    for name, (rules, accounts) in ROLES.items():
        role = {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": {"name": name}}
        binding = {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": sa} for sa in accounts],
        }
        for obj in ({**role, "rules": rules}, binding):
            cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


_NO_BROWSER = "needs Debian's chromium and chromium-driver (scripts/browser-deps installs them)"


@pytest.fixture(autouse=True)
def _browser_installed() -> None:
    """Skipped on a developer's machine without the browser; a failure in CI (scripts/test
    installs it first), so the browser tests can never silently not run there."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(_NO_BROWSER, pytrace=False)
    pytest.skip(_NO_BROWSER)


class ConsoleProcess:
    """`ordo console` as a subprocess with a kubeconfig; its URL, and all it printed."""

    def __init__(self, cp: ControlPlane, kubeconfig: Path, *flags: str) -> None:
        env = cp.env()
        env["KUBECONFIG"] = str(kubeconfig)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ordo.cli.main", "console", *flags],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.url = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("open "):
                self.url = line.split()[1]
                break
        assert self.url, "".join(self.lines)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def base(self) -> str:
        return self.url.split("/?")[0]

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Seen:
    """Every page source the browser showed and every byte of a live stream."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def page(self, driver: Any) -> str:
        self.texts.append(driver.page_source)
        return str(driver.page_source)

    def follow(self, console: ConsoleProcess, driver: Any, path: str) -> threading.Thread:
        cookies = {c["name"]: c["value"] for c in driver.get_cookies()}

        def read() -> None:
            try:
                with httpx.stream("GET", console.base + path, cookies=cookies, timeout=None) as r:
                    for chunk in r.iter_text():
                        self.texts.append(chunk)
            except httpx.HTTPError:
                return

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread


def manifests(cp: ControlPlane, ns: str, tool_url: str) -> None:
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}, "note": {"type": "string"}},
    }
    pay = [
        {"toolCalls": [{"tool": "pay", "arguments": {"amount": 4242, "note": HIDDEN_ARG_CANARY}}]},
        {"text": "could not pay"},
    ]
    deploy = [
        {"toolCalls": [{"tool": "deploy", "arguments": {"target": SHOWN_ARG_CANARY}}]},
        {"text": "deployed"},
    ]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "model-key"},
        "stringData": {"apiKey": SECRET_CANARY},
    }
    cp.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(secret))
    for manifest in (
        doc("ModelEndpoint", "pay-model", {"provider": "mock", "mock": {"turns": pay}}),
        doc("ModelEndpoint", "deploy-model", {"provider": "mock", "mock": {"turns": deploy}}),
        doc(
            "Tool",
            "pay",
            {
                "type": "http",
                "description": "pays",
                "http": {"url": tool_url},
                "inputSchema": schema,
            },
        ),
        doc(
            "Tool",
            "deploy",
            {
                "type": "http",
                "description": "deploys",
                "http": {"url": tool_url},
                "approval": {"required": True, "timeout": "1h"},
            },
        ),
        doc("Agent", "payer", {"modelRef": "pay-model", "tools": ["pay"]}),
        doc("Agent", "deployer", {"modelRef": "deploy-model", "tools": ["deploy"]}),
        doc(
            "AgentPolicy",
            "limits",
            {
                "onToolDenied": "ReturnError",
                "toolRules": [
                    {
                        "name": "over-100",
                        "tools": ["pay"],
                        "when": "args.amount > 100",
                        "action": "Deny",
                    }
                ],
            },
        ),
    ):
        apply(cp, ns, manifest)


def in_namespace(kubeconfig: Path, ns: str) -> Path:
    """The kubeconfig with `ns` as its context's namespace."""
    config = yaml.safe_load(kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = ns
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig


def row_text(driver: Any, ns: str, name: str) -> str:
    rows = driver.find_elements(By.CSS_SELECTOR, f'tr[data-task="{ns}/{name}"]')
    return str(rows[0].text) if rows else ""


def test_the_console_in_a_browser(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, browser: Any
) -> None:
    cp, ns, driver = control_plane, namespace, browser
    IMAGES.mkdir(parents=True, exist_ok=True)
    seen = Seen()
    consoles: list[ConsoleProcess] = []
    with CountingTool() as tool:
        manifests(cp, ns, tool.url)
        try:
            # The admin may list Tasks everywhere: one list across all namespaces.
            admin = ConsoleProcess(cp, Path(cp.kubeconfig), "--tracing-url", TRACING)
            consoles.append(admin)
            assert "all namespaces (you may list Tasks in all of them), as admin" in admin.output()
            # Without the token: refused, and no session.
            driver.get(admin.base + "/")
            assert "not logged in" in seen.page(driver)
            assert httpx.get(admin.base + "/").status_code == 401

            driver.get(admin.url)
            assert "token=" not in driver.current_url  # dropped by the redirect
            assert "<h1>Tasks</h1>" in seen.page(driver)
            wait_for(
                lambda: (
                    driver.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "open"
                ),
                30,
                what="live stream open",
            )
            driver.execute_script("window.notReloaded = true")
            stream = seen.follow(admin, driver, "/live/tasks?rv=")

            # The list updates live: the Task appears, then finishes, on the same page.
            apply(cp, ns, doc("Task", "pay", {"agentRef": "payer", "input": PROMPT_CANARY}))
            assert wait_task(cp, ns, "pay")["status"]["phase"] == "Succeeded"
            wait_for(
                lambda: "Succeeded" in row_text(driver, ns, "pay"), 30, what="live Succeeded row"
            )
            assert driver.execute_script("return window.notReloaded") is True
            seen.page(driver)
            driver.save_screenshot(str(IMAGES / "console-tasks.png"))

            # The Task page: its steps, the denied call and why.
            driver.get(admin.base + f"/tasks/{ns}/pay")
            page = seen.page(driver)
            assert "Step 1: model call" in page and "Step 2: model call" in page
            trace_id = cp_json(cp, ns, "pay")["status"]["traceId"]
            link = driver.find_element(
                By.CSS_SELECTOR, f'a[href="{TRACING.format(traceId=trace_id)}"]'
            )
            assert link.text == trace_id
            denied = driver.find_element(By.CSS_SELECTOR, "tr.decision-denied").text
            assert "pay" in denied and "denied" in denied and "ToolRuleDenied" in denied, denied
            driver.execute_script("document.getElementById('h-steps').scrollIntoView()")
            driver.save_screenshot(str(IMAGES / "console-task.png"))

            # A call waiting for approval, decided from the page.
            apply(cp, ns, doc("Task", "gated", {"agentRef": "deployer", "input": PROMPT_CANARY}))
            wait_for(
                lambda: (
                    (cp_json(cp, ns, "gated").get("status") or {}).get("pendingApprovals") or None
                ),
                60,
                what="a waiting call",
            )
            cp.kubectl("create", "serviceaccount", "viewer", "-n", ns)
            cp.kubectl("create", "serviceaccount", "approver", "-n", ns)
            grant(cp, ns)
            # May list namespaces, and Tasks in this one only: the console reads that one.
            lister = f"console-lister-{ns}"
            cp.kubectl("create", "clusterrole", lister, "--verb=list", "--resource=namespaces")
            cp.kubectl(
                "create",
                "clusterrolebinding",
                lister,
                f"--clusterrole={lister}",
                f"--serviceaccount={ns}:lister",
            )
            kubeconfig = cp.service_account_kubeconfig(ns, "lister")
            consoles.append(ConsoleProcess(cp, kubeconfig))
            assert f"{ns} (the namespaces where you may list Tasks)" in consoles[-1].output()
            for who in ("viewer", "approver"):
                # No --namespace and no right to list namespaces: the context's namespace.
                kubeconfig = in_namespace(cp.service_account_kubeconfig(ns, who, create=False), ns)
                console = ConsoleProcess(cp, kubeconfig)
                consoles.append(console)
                assert f"{ns} (your kubeconfig context's namespace)" in console.output()
                driver.get(console.url)
                # What the rules review says they may do there (Events: neither may list).
                may = driver.find_element(By.CSS_SELECTOR, f'li[data-namespace="{ns}"]').text
                yes, no = may.split("you may not")
                assert "list Tasks" in yes and "list Events" in no, may
                assert ("approve and reject" in yes) == (who == "approver"), may
                if who == "viewer":
                    driver.save_screenshot(str(IMAGES / "console-may.png"))
                driver.get(console.base + "/approvals")  # the inbox lists the waiting call
                inbox = driver.find_element(By.CSS_SELECTOR, "table.inbox tbody").text
                assert "gated" in inbox and "deploy" in inbox, inbox
                driver.get(console.base + f"/tasks/{ns}/gated")
                page = seen.page(driver)
                assert SHOWN_ARG_CANARY in page  # as `ordo approvals` shows it
                if who == "approver":
                    driver.execute_script("document.getElementById('h-approvals').scrollIntoView()")
                    driver.save_screenshot(str(IMAGES / "console-approval.png"))
                button = "approve-" + first_call(page)
                wait_for(
                    lambda: driver.find_elements(By.ID, button),  # noqa: B023
                    10,
                    what=f"{button} in {driver.page_source}",
                )[0].click()
                if who == "viewer":
                    refusal = wait_for(
                        lambda: driver.find_elements(By.ID, "action-refusal"), 30, what="refusal"
                    )[0].text
                    assert "The API server refused: 403" in refusal and "toolapprovals" in refusal
                    seen.page(driver)
                    driver.save_screenshot(str(IMAGES / "console-refused.png"))
                    assert cp_json(cp, ns, "gated")["status"]["phase"] == "Running"
                else:
                    assert "toolapproval/gated-approve-" in seen.page(driver)
            status = wait_task(cp, ns, "gated")["status"]
            assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
            assert tool.count == 1
            driver.get(consoles[-1].base + f"/tasks/{ns}/gated")
            assert "Succeeded" in driver.find_element(By.ID, "phase").text
            for path in ("/", "/agents", "/approvals"):
                driver.get(consoles[0].base + path)  # its own cookie: still logged in
                seen.page(driver)
            assert "payer" in seen.texts[-2] and "limits" in seen.texts[-2]
        finally:
            for console in consoles:
                console.stop()
        stream.join(5)
    # No canary but the waiting call's argument, and that one only on the Task pages.
    everything = seen.texts + [c.output() for c in consoles]
    for text in everything:
        for canary in (SECRET_CANARY, PROMPT_CANARY, HIDDEN_ARG_CANARY):
            assert canary not in text
    assert any("changed" in t for t in seen.texts)
    for console in consoles:
        assert SHOWN_ARG_CANARY not in console.output()
        assert not re.search(r"token=\w", console.output().replace(console.url, ""))


def cp_json(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        cp.kubectl("get", "task", name, "-n", ns, "-o", "json").stdout
    )
    return result


def first_call(page: str) -> str:
    found = re.search(r'id="approve-([^"]+)"', page)
    assert found, "no Approve button"
    return found.group(1)
