"""``deploy/``, validated offline (issue 11 item 5).

Core kinds are validated with ``kubernetes-validate`` (strict: an unknown
field is an error); the ``RayCluster`` against KubeRay's CRD schema, vendored
in ``tests/fixtures/kuberay/`` (its source and commit are in the file's
``$comment``). The security properties the README promises are checked on
the manifests themselves: token auth on Ray, a loopback dashboard, network
policies that admit only the cluster's pods to Ray and Redis, Redis with AOF
and an ACL password from a Secret, every Secret reference resolvable, and a
multi-stage, non-root Dockerfile with the ``cluster`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.33.0"
RAYCLUSTER_SCHEMA = (
    ROOT / "tests" / "fixtures" / "kuberay" / "raycluster-v1.schema.json"
)
PART_OF = {"app.kubernetes.io/part-of": "helmlog"}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append(
                    (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
                )
    return docs


DOCS = _documents()


def _kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in DOCS if d["kind"] == kind]


def _pod_specs() -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """``(where, pod spec, pod labels)`` of every workload, RayCluster groups too."""
    out = []
    for where, doc in DOCS:
        spec = doc.get("spec", {})
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            template = spec["template"]
            out.append(
                (where, template["spec"], template["metadata"].get("labels", {}))
            )
        elif doc["kind"] == "RayCluster":
            groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
            for group in groups:
                template = group["template"]
                out.append((where, template["spec"], template["metadata"]["labels"]))
    return out


@pytest.mark.parametrize(
    "doc",
    [d for _, d in DOCS if d["kind"] != "RayCluster"],
    ids=[w for w, d in DOCS if d["kind"] != "RayCluster"],
)
def test_core_manifests_validate_strictly(doc: dict[str, Any]) -> None:
    """Every core-kind manifest validates against Kubernetes' schema, strictly."""
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) is not None


def test_the_core_check_is_not_vacuous() -> None:
    """A field Kubernetes does not know fails strict validation."""
    (serve, *_rest) = _kind("Deployment")
    bad = json.loads(json.dumps(serve))
    bad["spec"]["template"]["spec"]["containers"][0]["bogus"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_the_raycluster_validates_against_the_vendored_kuberay_crd() -> None:
    """The RayCluster is what KubeRay's ray.io/v1 CRD schema admits."""
    schema = json.loads(RAYCLUSTER_SCHEMA.read_text())
    (cluster,) = _kind("RayCluster")
    jsonschema.Draft7Validator(schema).validate(cluster)


def test_the_crd_check_is_not_vacuous() -> None:
    """A field KubeRay does not know, or a wrong auth mode, fails the schema."""
    schema = json.loads(RAYCLUSTER_SCHEMA.read_text())
    (cluster,) = _kind("RayCluster")
    bad = json.loads(json.dumps(cluster))
    bad["spec"]["authOptions"]["mode"] = "password"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(schema).validate(bad)


def test_ray_uses_token_auth_and_keeps_the_dashboard_off_the_network() -> None:
    """Ray's transport unpickles: token auth on, dashboard on loopback only."""
    (cluster,) = _kind("RayCluster")
    spec = cluster["spec"]
    assert {"mode": "token", "secretName": "helmlog-ray-token"} == spec["authOptions"]
    assert "127.0.0.1" == spec["headGroupSpec"]["rayStartParams"]["dashboard-host"]
    exposed = [
        p.get("targetPort", p["port"])
        for svc in _kind("Service")
        for p in svc["spec"]["ports"]
    ]
    assert 8265 not in exposed and "dashboard" not in exposed


def _policy_for(labels: dict[str, str]) -> list[dict[str, Any]]:
    found = []
    for policy in _kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"]
        wanted = selector.get("matchLabels", {})
        exprs = selector.get("matchExpressions", [])
        if all(labels.get(k) == v for k, v in wanted.items()) and all(
            labels.get(e["key"]) in e["values"] for e in exprs
        ):
            found.append(policy)
    return found


@pytest.mark.parametrize(
    "name", ["helmlog-ray", "helmlog-redis", "helmlog-redis-cluster"]
)
def test_ray_and_redis_admit_only_the_clusters_own_pods(name: str) -> None:
    """A NetworkPolicy selects these pods; every rule admits helmlog pods only."""
    labelled = [
        lab for _, _, lab in _pod_specs() if lab.get("app.kubernetes.io/name") == name
    ]
    assert labelled, f"no pods named {name}"
    for labels in labelled:
        policies = _policy_for(labels)
        assert policies, f"no NetworkPolicy selects {labels}"
        for policy in policies:
            assert ["Ingress"] == policy["spec"]["policyTypes"]
            for rule in policy["spec"]["ingress"]:
                sources = rule["from"]
                assert sources and all(set(s) == {"podSelector"} for s in sources), (
                    f"{policy['metadata']['name']} admits more than pods"
                )
                for s in sources:
                    selected = s["podSelector"]["matchLabels"]
                    assert selected in (
                        PART_OF,
                        {"app.kubernetes.io/name": "helmlog-redis-cluster"},
                    )


def test_every_workload_pod_is_part_of_helmlog() -> None:
    """The policies' ``from`` label is on every pod that must reach Ray or Redis."""
    assert [] == [
        w
        for w, _, lab in _pod_specs()
        if lab.get("app.kubernetes.io/part-of") != "helmlog"
    ]


def test_redis_keeps_an_append_only_file_and_an_acl_user() -> None:
    """AOF (``appendfsync everysec``); the default user off; a Secret's password."""
    for config in _kind("ConfigMap"):
        text = config["data"].get("redis.conf")
        if text is None:
            continue
        lines = {line.strip() for line in text.splitlines()}
        assert {
            "appendonly yes",
            "appendfsync everysec",
            "maxmemory-policy noeviction",
        } <= lines
    redis = [d for d in _kind("StatefulSet") if "redis" in d["metadata"]["name"]]
    assert 2 == len(redis)
    for sts in redis:
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        script = " ".join(container["args"])
        assert "user default off" in script and "user helmlog on" in script
        env = {e["name"]: e for e in container["env"]}
        assert {"name": "helmlog-redis", "key": "password"} == env["REDIS_PASSWORD"][
            "valueFrom"
        ]["secretKeyRef"]


def _secret_refs() -> list[tuple[str, str, str | None]]:
    refs: list[tuple[str, str, str | None]] = []

    def walk(where: str, node: Any) -> None:
        if isinstance(node, dict):
            if "secretKeyRef" in node:
                refs.append(
                    (where, node["secretKeyRef"]["name"], node["secretKeyRef"]["key"])
                )
            if "secret" in node and isinstance(node["secret"], dict):
                for item in node["secret"].get("items", [{"key": None}]):
                    refs.append((where, node["secret"]["secretName"], item["key"]))
            for value in node.values():
                walk(where, value)
        elif isinstance(node, list):
            for value in node:
                walk(where, value)

    for where, doc in DOCS:
        walk(where, doc)
    (cluster,) = _kind("RayCluster")
    refs.append(
        ("RayCluster", cluster["spec"]["authOptions"]["secretName"], "auth_token")
    )
    return refs


def test_every_secret_reference_names_a_secret_and_key_that_exist() -> None:
    """The chain key, approver tokens, Redis password and Ray token are all Secrets."""
    secrets = {s["metadata"]["name"]: set(s["stringData"]) for s in _kind("Secret")}
    assert {
        "helmlog-chain-key",
        "helmlog-auth",
        "helmlog-redis",
        "helmlog-ray-token",
    } <= set(secrets)
    missing = [
        (where, name, key)
        for where, name, key in _secret_refs()
        if name not in secrets or (key is not None and key not in secrets[name])
    ]
    assert [] == missing


def test_serve_is_authenticated_and_probed_on_healthz() -> None:
    """``helmlog serve`` runs with ``--auth`` from the Secret, ready on /healthz."""
    (serve,) = [
        d for d in _kind("Deployment") if d["metadata"]["name"] == "helmlog-serve"
    ]
    (container,) = serve["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert "serve" == args[0]
    assert "/etc/helmlog/auth.toml" == args[args.index("--auth") + 1]
    assert args[args.index("--cluster") + 1].startswith("ray://")
    assert "/healthz" == container["readinessProbe"]["httpGet"]["path"]
    assert (
        "token"
        == {e["name"]: e.get("value") for e in container["env"]}["RAY_AUTH_MODE"]
    )


def test_the_auth_file_in_the_secret_is_one_helmlog_serve_reads() -> None:
    """The example auth file parses with helmlog's own reader."""
    from helmlog.gateway.http import Authenticator

    (auth,) = [s for s in _kind("Secret") if s["metadata"]["name"] == "helmlog-auth"]
    import tomllib

    parsed = Authenticator.from_mapping(tomllib.loads(auth["stringData"]["auth.toml"]))
    assert parsed.header is not None


def test_the_collector_receives_otlp_for_traces_and_logs() -> None:
    """The collector config parses and pipes OTLP traces and logs."""
    (config,) = [c for c in _kind("ConfigMap") if "config.yaml" in c["data"]]
    parsed = yaml.safe_load(config["data"]["config.yaml"])
    pipelines = parsed["service"]["pipelines"]
    assert (["otlp"], ["otlp"]) == (
        pipelines["traces"]["receivers"],
        pipelines["logs"]["receivers"],
    )


def test_the_dockerfile_is_multi_stage_non_root_with_the_cluster_extra() -> None:
    """Two stages, ``uv sync --locked --extra cluster``, and a numeric non-root USER."""
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    stages = [line for line in lines if line.startswith("FROM ")]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert 2 == len(stages)
    assert any(
        "uv sync --locked" in line and "--extra cluster" in line for line in lines
    )
    assert ["10001:10001"] == users


def _lock_version(package: str) -> str:
    import tomllib

    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (found,) = [p["version"] for p in lock["package"] if p["name"] == package]
    return str(found)


def test_the_raycluster_runs_the_ray_the_lock_pins() -> None:
    """``rayVersion`` is read from ``uv.lock`` (issue 28 item 6): the image's
    Ray and the operator's idea of it are one version."""
    (cluster,) = _kind("RayCluster")
    assert _lock_version("ray") == cluster["spec"]["rayVersion"]


def test_the_dockerfile_copies_every_layer_the_wheel_installs() -> None:
    """Each folder ``pyproject.toml`` maps to a package is copied into the
    build stage; a layer left out would import in tests and fail in the image."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(project["tool"]["setuptools"]["package-dir"].values())
    text = (DEPLOY / "Dockerfile").read_text()
    copied = {
        line.split()[1].rstrip("/")
        for line in text.splitlines()
        if line.startswith("COPY ") and line.split()[1].endswith("/")
    }
    assert folders <= copied, f"not copied into the image: {sorted(folders - copied)}"


def _cmd() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("CMD ")]
    parsed: list[str] = json.loads(line.removeprefix("CMD "))
    return parsed


def _agents_named() -> list[str]:
    cmd = _cmd()
    (serve,) = [
        d for d in _kind("Deployment") if d["metadata"]["name"] == "helmlog-serve"
    ]
    (container,) = serve["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    return [cmd[cmd.index("--agent") + 1], args[args.index("--agent") + 1]]


def test_the_image_and_the_manifests_serve_an_agent_the_wheel_ships() -> None:
    """The default command has the ``--agent`` ``serve`` requires, and what it
    and the manifests name is a module of the installed package: built on a
    store, the desk answers a refund and pauses one over its four-eyes line."""
    import asyncio
    import importlib

    from helmlog import is_ask_pause
    from helmlog.events import open_event_store

    cmd = _cmd()
    assert "serve" == cmd[0]
    for spec in _agents_named():
        module, _, attr = spec.partition(":")
        assert module.startswith("helmlog."), spec
        factory = getattr(importlib.import_module(module), attr)
        agent = factory(open_event_store("memory://"))
        done = asyncio.run(agent.run("Refund order 7 for $250"))
        assert isinstance(done, str) and "Refunded $250.00 on order 7" in done
        paused = asyncio.run(agent.run("Refund order 8 for $800"))
        assert is_ask_pause(paused) and "four-eyes" == paused.ask.middleware
