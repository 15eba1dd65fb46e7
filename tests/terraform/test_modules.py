"""The modules that deploy Meridian on Kubernetes (``terraform/modules/``), checked as
far as this machine allows. Kubernetes cannot run here, and the kubernetes provider
cannot be installed (its registry is out of reach), so the root modules are not
planned or applied; instead:

- the HCL is formatted (``tofu fmt -check``) and the provider-free ``manifests``
  modules validate (``tofu validate``);
- its structure is read with python-hcl2: typed, described variables, each root module
  passing every variable to its ``manifests`` module and applying every object it
  computes, the kubernetes provider pinned;
- the objects are rendered by OpenTofu itself (a root module calling ``manifests`` with
  an operator's inputs, applied: outputs only) and each is checked against Kubernetes'
  own schemas, strictly (kubernetes-validate; an unknown field fails);
- they are scanned by checkov (its Kubernetes checks), with no finding but the few
  listed in ``ACCEPTED`` with the reason each is accepted;
- what the control plane's Kubernetes provisioner relies on is there: the StatefulSet
  and headless Service names, broker ids from ordinals, the provisioner's settings and
  the Role that allows its calls and nothing more; and that the StatefulSets leave their
  size to it;
- each process gets the secrets it uses and no more, the NetworkPolicies admit whom
  they name by what no tenant can set, the API takes the Ingress' scheme (a real
  waitress, started with the module's flags), and what writes files writes them on
  volumes (the root filesystems are read-only)."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import hcl2
import kubernetes_validate
import pytest
import waitress
from waitress.adjustments import Adjustments

from tests.support.brokers import REPO_ROOT
from tests.support.terraform import TerraformTools, checkov, run_tofu

MODULES = REPO_ROOT / "terraform" / "modules"
IMAGE = "registry.example/meridian@sha256:" + "0" * 64
KUBERNETES_VERSION = "1.33.0"

REGION_INPUTS: dict[str, dict[str, Any]] = {
    "tls-and-store": {
        "region": "eu-west", "namespace": "meridian-eu-west", "image": IMAGE,
        "control_plane_secret": "meridian", "identity": {"keycloak_url": "https://id.example"},
        "broker_tls_secret": "broker-tls", "monitoring_namespaces": ["monitoring"],
        "clusters": {
            "main": {"storage_class": "fast-ssd", "storage_size": "500Gi",
                     "remote_store_uri": "s3://tier/eu-west",
                     "remote_store_options_secret": "store"},
            "bulk": {"broker_cpu": "4", "broker_memory": "16Gi"},
        },
    },
    "plain": {
        "region": "us-east", "namespace": "meridian", "create_namespace": False, "image": IMAGE,
        "control_plane_secret": "meridian", "identity": {"keycloak_url": "https://id.example"},
        "clusters": {"main": {}},
    },
}  # fmt: skip
GLOBAL_INPUTS: dict[str, dict[str, Any]] = {
    "everything-here": {
        "namespace": "meridian", "image": IMAGE, "control_plane_secret": "meridian",
        "identity": {"keycloak_url": "https://id.example"},
        "api": {"host": "meridian.example", "tls_secret": "api-tls", "ingress_class": "nginx"},
        "object_store": {"export_allowed_uris": ["s3://lake/exports/{tenant}/"],
                         "index_root": "s3://lake/indexes"},
        "postgres": {"storage_class": "fast-ssd"}, "broker_tls_ca_secret": "broker-ca",
        "region_namespaces": ["meridian-eu-west", "meridian-us-east"],
    },
    "managed-services": {
        "namespace": "meridian", "create_namespace": False, "image": IMAGE,
        "control_plane_secret": "meridian",
        "identity": {"keycloak_url": "https://login.example/", "realm": "corp"},
        "api": {"host": "meridian.example", "tls_secret": "api-tls"},
        "object_store": {"export_allowed_uris": ["s3://lake/exports/{tenant}/"],
                         "index_root": "s3://lake/indexes"},
        "postgres": {"deploy": False}, "redis": {"deploy": False}, "keycloak": {"deploy": False},
    },
}  # fmt: skip

# checkov findings accepted, by check and object kind, with why.
ACCEPTED = {
    ("CKV_K8S_35", "Deployment"): "the control plane reads its settings (the database URL, "
    "the Django secret key) from the environment only: secretKeyRef, never literals",
    ("CKV_K8S_35", "Job"): "the migration runs the control plane, which reads its settings "
    "from the environment only",
    ("CKV_K8S_35", "StatefulSet"): "Postgres' and Redis' images take their passwords from "
    "the environment",
    ("CKV_K8S_38", "Deployment"): "the controllers' provisioner calls the Kubernetes API "
    "(the Role allows statefulsets/scale and pods, in their namespace only)",
    ("CKV_K8S_40", "StatefulSet"): "Postgres' and Redis' images run as their own user (999)",
    ("CKV_K8S_40", "Deployment"): "Keycloak's image runs as its own user (1000)",
    ("CKV_K8S_43", "StatefulSet"): "Postgres' and Redis' images default to a tag: operators "
    "pin digests through the variables (Meridian's own image is given by digest)",
    ("CKV_K8S_43", "Deployment"): "Keycloak's image defaults to a tag (as above)",
    ("CKV_K8S_8", "Deployment"): "the Celery worker and beat and the controllers serve no "
    "port; Kubernetes restarts them when they exit",
    ("CKV_K8S_9", "Deployment"): "the Celery worker and beat and the controllers serve no "
    "traffic to be ready for",
}


def render(
    tools: TerraformTools, module: str, inputs: dict[str, Any], workdir: Path
) -> dict[str, Any]:
    """The objects ``terraform/modules/<module>/manifests`` computes from ``inputs``,
    by OpenTofu: a root module calling it, applied (it has outputs only)."""
    workdir.mkdir(parents=True)
    source = MODULES / module / "manifests"
    (workdir / "main.tf").write_text(
        f'module "m" {{\n  source = "{source}"\n'
        + "".join(f"  {name} = {json.dumps(value)}\n" for name, value in inputs.items())
        + '}\n\noutput "manifests" {\n  value = module.m.manifests\n}\n'
    )
    run_tofu(tools, ["init"], cwd=workdir, env={})
    run_tofu(tools, ["apply", "-auto-approve"], cwd=workdir, env={})
    shown = run_tofu(tools, ["output", "-json", "manifests"], cwd=workdir, env={})
    objects: dict[str, Any] = json.loads(shown.stdout)
    return objects


@pytest.fixture(scope="module")
def rendered(
    terraform_tools: TerraformTools, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """Every rendering: ``"<module>/<inputs>"`` -> its objects by key."""
    base = tmp_path_factory.mktemp("render")
    cases = [("region", n, i) for n, i in REGION_INPUTS.items()]
    cases += [("global", n, i) for n, i in GLOBAL_INPUTS.items()]
    return {f"{m}/{n}": render(terraform_tools, m, i, base / f"{m}-{n}") for m, n, i in cases}


def _tf_files() -> list[Path]:
    return sorted(MODULES.rglob("*.tf"))


def _parsed(path: Path) -> dict[str, Any]:
    """A file's blocks as python-hcl2 reads them, with string literals' quotes and its
    bookkeeping keys (``__is_block__``, comments) taken off."""
    with path.open() as file:
        parsed: dict[str, Any] = _clean(hcl2.load(file))
    return parsed


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {_unquote(k): _clean(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return _unquote(value) if isinstance(value, str) else value


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def _variables(folder: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in folder.glob("*.tf"):
        for block in _parsed(path).get("variable", []):
            found.update(block)
    return found


def test_the_hcl_is_formatted_and_the_manifest_modules_validate(
    terraform_tools: TerraformTools, tmp_path: Path
) -> None:
    run_tofu(
        terraform_tools,
        ["fmt", "-check", "-recursive", str(REPO_ROOT / "terraform")],
        cwd=tmp_path,
        env={},
    )
    for module in ("region", "global"):
        copy = tmp_path / module
        subprocess.run(["cp", "-r", str(MODULES / module / "manifests"), str(copy)], check=True)
        run_tofu(terraform_tools, ["init"], cwd=copy, env={})
        run_tofu(terraform_tools, ["validate"], cwd=copy, env={})


@pytest.mark.parametrize("module", ["region", "global"])
def test_every_variable_is_typed_described_and_passed_through(module: str) -> None:
    root, manifests = _variables(MODULES / module), _variables(MODULES / module / "manifests")
    assert root, module
    for name, spec in {**root, **manifests}.items():
        assert spec.get("type"), f"{module}: variable {name} has no type"
        assert spec.get("description"), f"{module}: variable {name} has no description"
    # The root module's variables are the manifests module's, each handed down as is.
    assert {n: (s["type"], s.get("default")) for n, s in root.items()} == {
        n: (s["type"], s.get("default")) for n, s in manifests.items()
    }
    calls = [b["manifests"] for b in _parsed(MODULES / module / "main.tf")["module"]]
    assert {n: v for n, v in calls[0].items() if n != "source"} == {
        n: f"${{var.{n}}}" for n in root
    }


@pytest.mark.parametrize("module", ["region", "global"])
def test_the_root_modules_apply_every_object_with_a_pinned_provider(module: str) -> None:
    main = _parsed(MODULES / module / "main.tf")
    kinds = {kind for block in main["resource"] for kind in block}
    assert kinds == {"kubernetes_manifest"}, kinds
    manifests = {
        name: body
        for block in main["resource"]
        for names in block.values()
        for name, body in names.items()
    }
    assert set(manifests) == {"namespace", "this"}, manifests
    # Namespaces first, then every other object: together, all that manifests computes.
    assert 'if object.kind == "Namespace"' in manifests["namespace"]["for_each"]
    assert 'if object.kind != "Namespace"' in manifests["this"]["for_each"]
    for each in (manifests["namespace"], manifests["this"]):
        assert "module.manifests.manifests" in each["for_each"]
    if module == "region":  # the brokers' size, the provisioner's: never planned by Terraform
        assert '"spec.replicas"' in manifests["this"]["computed_fields"]
    versions = _parsed(MODULES / module / "versions.tf")["terraform"][0]
    kubernetes = versions["required_providers"][0]["kubernetes"]
    assert kubernetes["source"] == "hashicorp/kubernetes"
    assert kubernetes["version"].startswith("~>")


def test_secrets_are_referenced_never_written(rendered: dict[str, dict[str, Any]]) -> None:
    """Passwords, keys and connection URLs come from Secrets by reference (secretKeyRef,
    Secret volumes): no value of one is in the objects, hence none in Terraform's state."""
    secret_like = re.compile(r"PASSWORD|SECRET|TOKEN|DATABASE_URL|BROKER_URL")
    checked = 0
    for case, objects in rendered.items():
        for key, obj in objects.items():
            spec = obj.get("spec", {}).get("template", {}).get("spec", {})
            for container in spec.get("containers", []):
                for entry in container.get("env", []):
                    if secret_like.search(entry["name"]):
                        assert "value" not in entry, f"{case} {key}: {entry}"
                        assert entry["valueFrom"]["secretKeyRef"]["name"], entry
                        checked += 1
    assert checked >= 20, checked
    for path in _tf_files():
        assert "-----begin" not in path.read_text().lower(), path


def test_every_rendered_object_matches_the_kubernetes_schemas(
    rendered: dict[str, dict[str, Any]],
) -> None:
    count = 0
    for case, objects in rendered.items():
        for key, obj in objects.items():
            try:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{case} {key}: {exc}") from exc
            count += 1
    assert count >= 40, count
    # The check is strict: an unknown field, or a wrong type, is refused.
    statefulset = json.loads(json.dumps(rendered["region/plain"]["broker_statefulset_main"]))
    statefulset["spec"]["replicaz"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)
    statefulset = json.loads(json.dumps(rendered["region/plain"]["broker_statefulset_main"]))
    statefulset["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


def test_checkov_finds_nothing_but_what_is_accepted(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    kinds = {}
    for case, objects in rendered.items():
        for key, obj in objects.items():
            name = f"{case.replace('/', '-')}-{key}.json"
            (tmp_path / name).write_text(json.dumps(obj, indent=1))
            kinds[name] = obj["kind"]
    done = subprocess.run(
        [str(checkov()), "-d", str(tmp_path), "--framework", "kubernetes", "--skip-download",
         "--output", "json", "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    assert report["summary"]["resource_count"] >= 40, report["summary"]
    findings = {
        (f["check_id"], kinds[Path(f["file_path"]).name]): f"{f['file_path']}: {f['check_name']}"
        for f in report["results"]["failed_checks"]
    }
    unaccepted = {k: v for k, v in findings.items() if k not in ACCEPTED}
    assert not unaccepted, unaccepted
    # Every acceptance is still needed: one that no longer matches anything goes.
    assert set(ACCEPTED) <= set(findings), set(ACCEPTED) - set(findings)


def test_the_objects_are_what_the_kubernetes_provisioner_expects(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """controlplane/provisioning/kubernetes.py: StatefulSet and headless Service
    ``broker-<cluster>``, broker N the pod of ordinal N-1 at its stable DNS name, the
    provisioner's settings, and a Role allowing its calls only."""
    objects = rendered["region/tls-and-store"]
    for cluster in ("main", "bulk"):
        statefulset = objects[f"broker_statefulset_{cluster}"]
        service = objects[f"broker_service_{cluster}"]
        assert statefulset["metadata"]["name"] == service["metadata"]["name"] == f"broker-{cluster}"
        assert statefulset["spec"]["serviceName"] == f"broker-{cluster}"
        # Its size is the provisioner's alone: an apply neither owns nor resets it.
        assert "replicas" not in statefulset["spec"]
        # A broker scaled away, or a cluster removed, leaves no volume behind.
        assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"] == {
            "whenDeleted": "Delete", "whenScaled": "Delete",
        }  # fmt: skip
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        script = statefulset["spec"]["template"]["spec"]["containers"][0]["command"][2]
        assert "--id $((ordinal + 1))" in script
        assert f"--advertised-host ${{HOSTNAME}}.broker-{cluster}.meridian-eu-west.svc" in script
        assert f"--cluster-id {cluster}" in script
        assert "--listen 0.0.0.0:9092 --kafka-listen 0.0.0.0:9093" in script
    main = objects["broker_statefulset_main"]["spec"]
    assert main["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast-ssd"
    assert (
        "--remote-store-uri s3://tier/eu-west"
        in main["template"]["spec"]["containers"][0]["command"][2]
    )
    assert "--tls-cert-file" in main["template"]["spec"]["containers"][0]["command"][2]

    controller = objects["controller"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in controller["containers"][0]["env"]}
    assert env["MERIDIAN_KUBERNETES_NAMESPACE"] == "meridian-eu-west"
    assert (env["MERIDIAN_KUBERNETES_BROKER_PORT"], env["MERIDIAN_KUBERNETES_KAFKA_PORT"]) == (
        "9092",
        "9093",
    )
    assert controller["serviceAccountName"] == "meridian-controller"
    rules = objects["role"]["rules"]
    assert rules == [
        {"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "verbs": ["get", "patch"],
         "resourceNames": ["broker-bulk", "broker-main"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]  # fmt: skip
    assert "namespace" not in rendered["region/plain"]  # create_namespace = false
    managed = rendered["global/managed-services"]
    assert not {"postgres_statefulset", "redis_statefulset", "keycloak_deployment"} & set(managed)


def _env(container: dict[str, Any]) -> dict[str, Any]:
    """A container's environment: a name's value, or the Secret key it is read from."""
    return {
        e["name"]: e.get("value") or "secret:" + e["valueFrom"]["secretKeyRef"]["key"]
        for e in container.get("env", [])
    }


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def test_each_process_gets_the_secrets_it_uses_and_no_more(
    rendered: dict[str, dict[str, Any]],
) -> None:
    region = rendered["region/tls-and-store"]
    controller = _pod(region["controller"])
    env = _env(controller["containers"][0])
    assert {n: v for n, v in env.items() if v.startswith("secret:")} == {
        "MERIDIAN_DATABASE_URL": "secret:database-url",
        "MERIDIAN_CELERY_BROKER_URL": "secret:celery-broker-url",
        "MERIDIAN_CONTROLLER_CLIENT_SECRET": "secret:controller-client-secret",
    }  # no Keycloak admin password, no broker secret, no Django key
    assert env["MERIDIAN_BROKER_TLS_CA_FILE"] == "/etc/meridian/tls/ca.crt"
    tls = next(v for v in controller["volumes"] if v["name"] == "tls")
    assert tls["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # not tls.key
    broker = _pod(region["broker_statefulset_main"])
    assert "items" not in next(v for v in broker["volumes"] if v["name"] == "tls")["secret"]
    client = next(v for v in broker["volumes"] if v["name"] == "client")["secret"]
    assert client["items"] == [{"key": "broker-client-secret", "path": "secret"}]
    assert "env" not in broker["containers"][0]

    control = rendered["global/everything-here"]
    service_keys = {
        "secret:database-url", "secret:celery-broker-url", "secret:secret-key",
        "secret:keycloak-admin-password", "secret:controller-client-secret",
    }  # fmt: skip
    for name in ("api", "worker", "beat"):
        pod = _pod(control[f"{name}_deployment"])
        env = _env(pod["containers"][0])
        assert {v for v in env.values() if v.startswith("secret:")} == service_keys, name
        # They call brokers too (the gateway, the reconciler): with the brokers' CA.
        assert env["MERIDIAN_BROKER_TLS_CA_FILE"] == "/etc/meridian/broker-ca/ca.crt", name
        ca = next(v for v in pod["volumes"] if v["name"] == "broker-ca")["secret"]
        assert ca == {"secretName": "broker-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    migrate = _env(_pod(control["migrate_job"])["containers"][0])
    assert {v for v in migrate.values() if v.startswith("secret:")} == (
        service_keys - {"secret:secret-key"} | {"secret:broker-client-secret"}
    )
    managed = rendered["global/managed-services"]
    assert "MERIDIAN_BROKER_TLS_CA_FILE" not in _env(
        _pod(managed["api_deployment"])["containers"][0]
    )


def test_the_network_policies_admit_whom_they_name_by_what_no_tenant_can_set(
    rendered: dict[str, dict[str, Any]],
) -> None:
    """Postgres and Redis: the control plane's own pods (no broker) and the regions'
    controllers, their namespaces by the name Kubernetes sets; brokers' metrics: the
    monitoring namespaces only."""
    control = rendered["global/everything-here"]
    by_name = "kubernetes.io/metadata.name"
    for name in ("postgres", "redis"):
        (rule,) = control[f"{name}_network_policy"]["spec"]["ingress"]
        own, controllers = rule["from"]
        allowed = own["podSelector"]["matchExpressions"][0]
        assert allowed["operator"] == "In"
        assert "namespaceSelector" not in own
        assert set(allowed["values"]) >= {"meridian-api", "meridian-worker", "meridian-beat"}
        assert not [v for v in allowed["values"] if v.startswith("broker")]
        assert ("keycloak" in allowed["values"]) == (name == "postgres")
        assert controllers == {
            "namespaceSelector": {"matchExpressions": [
                {"key": by_name, "operator": "In",
                 "values": ["meridian-eu-west", "meridian-us-east"]}]},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "meridian-controller"}},
        }  # fmt: skip
    region = rendered["region/tls-and-store"]
    rules = region["broker_network_policy"]["spec"]["ingress"]
    assert rules == [
        {"ports": [{"port": 9092, "protocol": "TCP"}, {"port": 9093, "protocol": "TCP"}]},
        {"from": [{"namespaceSelector": {"matchExpressions": [
            {"key": by_name, "operator": "In", "values": ["monitoring"]}]}}],
         "ports": [{"port": 9464, "protocol": "TCP"}]},
    ]  # fmt: skip
    plain = rendered["region/plain"]["broker_network_policy"]["spec"]["ingress"]
    assert [p["port"] for rule in plain for p in rule["ports"]] == [9092, 9093]


def test_the_api_takes_the_ingress_scheme(rendered: dict[str, dict[str, Any]]) -> None:
    """The API's waitress, started here with the module's own flags, sees https when the
    Ingress (which ends TLS) says so, and drops the forwarding headers it does not
    trust: Django then checks the console's CSRF origin and builds the sign-in's
    redirect URI against https://host."""
    command = _pod(rendered["global/everything-here"]["api_deployment"])["containers"][0]
    argv = command["command"]
    assert argv[:3] == ["python", "-m", "waitress"]
    assert argv[-1] == "controlplane.wsgi:application"
    kw, _ = Adjustments.parse_args(argv[3:-1])
    del kw["call"], kw["help"]  # the runner's own, as waitress.runner drops them
    seen: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(f"{environ['wsgi.url_scheme']} {environ.get('HTTP_X_FORWARDED_FOR')}")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    server = waitress.create_server(app, **{**kw, "port": 0, "host": "127.0.0.1"})
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for headers in ({"X-Forwarded-Proto": "https", "X-Forwarded-For": "6.6.6.6"}, {}):
            connection = http.client.HTTPConnection("127.0.0.1", server.effective_port, timeout=10)
            connection.request("POST", "/console/topics", body=b"", headers=headers)
            assert connection.getresponse().status == 200
            connection.close()
    finally:
        server.close()
        thread.join(10)
    assert seen == ["https None", "http None"]


def test_what_writes_files_writes_them_on_volumes(rendered: dict[str, dict[str, Any]]) -> None:
    """Every root filesystem is read-only: the beat's schedule, Keycloak's build of its
    own options (lib/quarkus, copied from the image first) are on volumes."""
    control = rendered["global/everything-here"]
    beat = _pod(control["beat_deployment"])["containers"][0]
    schedule = beat["command"][beat["command"].index("--schedule") + 1]
    assert any(schedule.startswith(m["mountPath"] + "/") for m in beat["volumeMounts"])
    keycloak = _pod(control["keycloak_deployment"])
    (copy,) = keycloak["initContainers"]
    assert copy["image"] == keycloak["containers"][0]["image"]
    assert copy["command"][-1] == "cp -R /opt/keycloak/lib/quarkus/. /quarkus/"
    assert {m["mountPath"]: m["name"] for m in copy["volumeMounts"]} == {"/quarkus": "quarkus"}
    mounts = {m["mountPath"]: m["name"] for m in keycloak["containers"][0]["volumeMounts"]}
    assert mounts["/opt/keycloak/lib/quarkus"] == "quarkus"
    assert {"name": "quarkus", "emptyDir": {}} in keycloak["volumes"]
    for objects in rendered.values():
        for obj in objects.values():
            if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
                pod = _pod(obj)
                for c in pod["containers"] + pod.get("initContainers", []):
                    assert c["securityContext"]["readOnlyRootFilesystem"] is True, c["name"]
    # Browsers and outside clients reach Keycloak at the identity URL's host.
    ingress = control["keycloak_ingress"]["spec"]
    assert ingress["rules"][0]["host"] == "id.example"
    assert ingress["tls"] == [{"hosts": ["id.example"], "secretName": "api-tls"}]


def test_the_migration_job_is_named_by_what_it_runs(rendered: dict[str, dict[str, Any]]) -> None:
    """A Job's template cannot change: a new image or setting is a new Job (Terraform
    replaces it: its name changed), and with no TTL an unchanged one stays, so a plan
    a day later does not make it again."""
    here = rendered["global/everything-here"]["migrate_job"]
    managed = rendered["global/managed-services"]["migrate_job"]
    assert "ttlSecondsAfterFinished" not in here["spec"]
    assert here["spec"]["template"] != managed["spec"]["template"]  # another realm
    assert here["metadata"]["name"] != managed["metadata"]["name"]
    assert here["metadata"]["name"].startswith("meridian-migrate-")
