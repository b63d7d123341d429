"""deploy/kubernetes/: every manifest validates against the Kubernetes JSON schemas
(kubernetes-validate, from PyPI through the dev extra, ships them: no network), strictly
(no unknown field); and the values that a clean drain depends on agree with each other
and with the daemon's config."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from pgworkerd import config as config_module

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
# The Secrets' example sits apart: `kubectl apply -f deploy/kubernetes/` must not apply
# its placeholder passwords over the real Secrets (review 25).
MANIFESTS = sorted(KUBERNETES.glob("*.yaml")) + sorted(KUBERNETES.glob("example-secrets/*.yaml"))


def resources() -> list[dict[str, Any]]:
    found = []
    for path in MANIFESTS:
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [r for r in resources() if r["kind"] == kind]


@pytest.mark.parametrize(
    "resource", resources(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}"
)
def test_each_manifest_validates_strictly_against_its_schema(resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, kubernetes_validate.latest_version(), strict=True)


def test_the_validation_rejects_an_unknown_field() -> None:
    bad = copy.deepcopy(by_kind("Deployment")[0])
    bad["spec"]["template"]["spec"]["containers"][0]["livenessProbee"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


def test_the_deployment_drains_within_its_grace_and_probes_the_daemon() -> None:
    (deployment,) = by_kind("Deployment")
    (configmap,) = by_kind("ConfigMap")
    config = config_module.parse(configmap["data"]["pgworkerd.yaml"], origin="configmap")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= config.shutdown_timeout + 15
    (container,) = pod["containers"]
    assert "lifecycle" not in container  # no preStop: the supervisor drains on TERM
    assert config.http is not None
    port = int(config.http.listen.rsplit(":", 1)[1])
    assert container["ports"][0]["containerPort"] == port
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/pgworkerd", "/tmp"} <= mounted


def test_the_database_urls_come_from_secrets_the_owner_role_only_to_the_migration() -> None:
    secrets = {s["metadata"]["name"] for s in by_kind("Secret")}

    def url_source(pod: dict[str, Any]) -> str:
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        ref = env["PGWORKERD_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] in secrets
        return str(ref["name"])

    (deployment,) = by_kind("Deployment")
    (job,) = by_kind("Job")
    assert url_source(deployment["spec"]["template"]["spec"]) == "pgworkerd-database"
    assert url_source(job["spec"]["template"]["spec"]) == "pgworkerd-migrate"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    # The config file holds no URL, so no password: the Secret is the only source.
    assert (
        "url" not in yaml.safe_load(by_kind("ConfigMap")[0]["data"]["pgworkerd.yaml"])["database"]
    )


def test_a_directory_apply_creates_no_secret() -> None:
    # `kubectl apply -f deploy/kubernetes/`, as docs/deploy.md says, applied the example
    # Secrets too: their CHANGE-ME passwords replaced the real ones just created.
    applied = [
        doc
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    assert {doc["kind"] for doc in applied} >= {"ConfigMap", "Deployment", "Job"}
    assert "Secret" not in {doc["kind"] for doc in applied}
