"""What the user may do in one namespace, from a SelfSubjectRulesReview
(authorization.k8s.io/v1): one request answers every question the pages ask (read Tasks,
Agents and Events; create ToolApprovals). Where the review is incomplete (an authorizer that
cannot list its rules, e.g. a webhook), what its rules do not grant is asked again with a
SelfSubjectAccessReview (docs/console.md#what-you-may-do)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import GROUP

SSRR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"


@dataclass(frozen=True)
class Ability:
    """One thing the pages ask about: `verb` on `resource` of API `group`."""

    label: str
    verb: str
    group: str
    resource: str


LIST_TASKS = Ability("list Tasks", "list", GROUP, "tasks")
CREATE_APPROVALS = Ability(
    "approve and reject (create ToolApprovals)", "create", GROUP, "toolapprovals"
)
ABILITIES = (
    Ability("get Tasks", "get", GROUP, "tasks"),
    LIST_TASKS,
    Ability("watch Tasks", "watch", GROUP, "tasks"),
    Ability("list Agents", "list", GROUP, "agents"),
    Ability("list Events", "list", "", "events"),
    CREATE_APPROVALS,
)


def review_body(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def grants(rules: list[dict[str, Any]], ability: Ability) -> bool:
    """Does one of the review's resource rules grant `ability` on every object (a rule
    limited to some resourceNames does not)?"""
    return any(
        _has(rule.get("verbs"), ability.verb)
        and _has(rule.get("apiGroups"), ability.group)
        and _has(rule.get("resources"), ability.resource)
        and not rule.get("resourceNames")
        for rule in rules
        if isinstance(rule, dict)
    )


@dataclass
class Permissions:
    """What the user may do in `namespace` (`granted`: each ability's label to yes or no) and
    how the console learned it (`source`, shown on the page)."""

    namespace: str
    granted: dict[str, bool]
    source: str

    @property
    def readable(self) -> bool:
        return self.granted.get(LIST_TASKS.label, False)

    @property
    def may_decide(self) -> bool:
        return self.granted.get(CREATE_APPROVALS.label, False)

    @property
    def allowed(self) -> list[str]:
        return [label for label, ok in self.granted.items() if ok]

    @property
    def refused(self) -> list[str]:
        return [label for label, ok in self.granted.items() if not ok]
