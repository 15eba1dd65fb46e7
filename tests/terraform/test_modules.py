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
  the Role that allows its calls and nothing more."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import kubernetes_validate
import pytest

from tests.support.brokers import REPO_ROOT
from tests.support.terraform import TerraformTools, checkov, run_tofu

MODULES = REPO_ROOT / "terraform" / "modules"
IMAGE = "registry.example/meridian@sha256:" + "0" * 64
KUBERNETES_VERSION = "1.33.0"

REGION_INPUTS: dict[str, dict[str, Any]] = {
    "tls-and-store": {
        "region": "eu-west", "namespace": "meridian-eu-west", "image": IMAGE,
        "control_plane_secret": "meridian", "identity": {"keycloak_url": "https://id.example"},
        "broker_tls_secret": "broker-tls",
        "clusters": {
            "main": {"broker_count": 3, "storage_class": "fast-ssd", "storage_size": "500Gi",
                     "remote_store_uri": "s3://tier/eu-west",
                     "remote_store_options_secret": "store"},
            "bulk": {"broker_count": 5, "broker_cpu": "4", "broker_memory": "16Gi"},
        },
    },
    "plain": {
        "region": "us-east", "namespace": "meridian", "create_namespace": False, "image": IMAGE,
        "control_plane_secret": "meridian", "identity": {"keycloak_url": "https://id.example"},
        "clusters": {"main": {"broker_count": 1}},
    },
}  # fmt: skip
GLOBAL_INPUTS: dict[str, dict[str, Any]] = {
    "everything-here": {
        "namespace": "meridian", "image": IMAGE, "control_plane_secret": "meridian",
        "identity": {"keycloak_url": "https://id.example"},
        "api": {"host": "meridian.example", "tls_secret": "api-tls", "ingress_class": "nginx"},
        "object_store": {"export_allowed_uris": ["s3://lake/exports/{tenant}/"],
                         "index_root": "s3://lake/indexes"},
        "postgres": {"storage_class": "fast-ssd"},
    },
    "managed-services": {
        "namespace": "meridian", "create_namespace": False, "image": IMAGE,
        "control_plane_secret": "meridian", "identity": {"keycloak_url": "https://id.example"},
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
    for cluster, count in (("main", 3), ("bulk", 5)):
        statefulset = objects[f"broker_statefulset_{cluster}"]
        service = objects[f"broker_service_{cluster}"]
        assert statefulset["metadata"]["name"] == service["metadata"]["name"] == f"broker-{cluster}"
        assert statefulset["spec"]["serviceName"] == f"broker-{cluster}"
        assert statefulset["spec"]["replicas"] == count
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
