"""deploy/ is valid without Docker or a cluster: schemas from PyPI wheels, commands that exist.

The compose file is checked against the compose-spec JSON schema that ``check-jsonschema`` ships
(``vendor.compose-spec``), the Kubernetes manifests by ``kubernetes-validate`` against the
OpenAPI schemas in its wheel (strict: unknown fields fail); both run offline. Each check is also
shown to reject a broken copy, so a validator that passes everything would fail here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from sagacity.settings import load_settings
from tests.ops.conftest import REPO, WORKER_COMMAND, Cli

DEPLOY = REPO / "deploy"
BIN = REPO / ".venv" / "bin"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))


def check_compose(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", path],
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_kubernetes(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "kubernetes-validate", "--strict", *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def k8s(kind: str, name: str) -> dict[str, Any]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                found: dict[str, Any] = doc
                return found
    raise LookupError(f"no {kind} {name} in deploy/k8s")


def test_compose_file_follows_the_compose_spec(tmp_path: Path) -> None:
    checked = check_compose(DEPLOY / "compose.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    broken = tmp_path / "compose.yaml"
    broken.write_text((DEPLOY / "compose.yaml").read_text().replace("services:", "servics:", 1))
    assert check_compose(broken).returncode != 0


def test_kubernetes_manifests_validate(tmp_path: Path) -> None:
    checked = check_kubernetes(*MANIFESTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    kinds = {
        (doc["kind"], doc["metadata"]["name"])
        for path in MANIFESTS
        for doc in yaml.safe_load_all(path.read_text())
    }
    assert {
        ("Deployment", "sagacity-worker"),
        ("Deployment", "sagacity-approvals"),
        ("Service", "sagacity-approvals"),
        ("Job", "sagacity-migrate"),
        ("ConfigMap", "sagacity-config"),
        ("Secret", "sagacity-secrets"),
        ("Secret", "sagacity-signing-key"),
        ("PersistentVolumeClaim", "sagacity-checkpoints"),
    } <= kinds

    broken = tmp_path / "worker.yaml"
    broken.write_text((DEPLOY / "k8s" / "worker.yaml").read_text().replace("replicas:", "replica:"))
    assert check_kubernetes(broken).returncode != 0


def test_every_deployed_worker_runs_the_tested_command() -> None:
    tested = shlex.split(WORKER_COMMAND)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    (cmd,) = re.findall(r"^CMD (\[.*\])$", dockerfile, flags=re.MULTILINE)
    assert "ENTRYPOINT" not in dockerfile
    assert json.loads(cmd) == tested

    worker = compose()["services"]["worker"]
    assert "command" not in worker and "entrypoint" not in worker  # the image's CMD
    assert worker["build"]["dockerfile"] == "deploy/Dockerfile"

    (container,) = k8s("Deployment", "sagacity-worker")["spec"]["template"]["spec"]["containers"]
    assert container["command"] == tested


async def test_the_other_deployed_commands_exist(sagacity: Cli) -> None:
    services = compose()["services"]
    (job,) = k8s("Job", "sagacity-migrate")["spec"]["template"]["spec"]["containers"]
    (api,) = k8s("Deployment", "sagacity-approvals")["spec"]["template"]["spec"]["containers"]
    assert job["command"] == services["migrate"]["command"]
    assert api["command"] == services["approvals"]["command"]
    shell, flag, script = services["migrate"]["command"]
    assert (shell, flag) == ("sh", "-c")
    migrations = [shlex.split(part) for part in script.split("&&")]
    assert migrations == [
        ["sagacity", "db", "migrate"],
        ["sagacity", "db", "grants", "--password-env", "SAGACITY_APP_PASSWORD"],
    ]
    for program, *args in [*migrations, api["command"]]:
        assert program == "sagacity"
        shown = await sagacity(*args, "--help")
        assert shown.code == 0, (args, shown.stderr)


def test_workers_get_their_grace_period_before_they_are_killed() -> None:
    config = k8s("ConfigMap", "sagacity-config")["data"]
    grace = load_settings(graceful_shutdown=config["SAGACITY_GRACEFUL_SHUTDOWN"]).graceful_shutdown
    pod = k8s("Deployment", "sagacity-worker")["spec"]["template"]["spec"]
    assert timedelta(seconds=pod["terminationGracePeriodSeconds"]) > grace

    worker = compose()["services"]["worker"]
    compose_grace = load_settings(
        graceful_shutdown=worker["environment"]["SAGACITY_GRACEFUL_SHUTDOWN"]
    ).graceful_shutdown
    assert timedelta(seconds=int(worker["stop_grace_period"].rstrip("s"))) > compose_grace


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_migrations_run_as_the_owner_and_workers_as_the_append_only_role() -> None:
    services = compose()["services"]
    migrate_env = services["migrate"]["environment"]
    assert migrate_env["SAGACITY_OWNER_DATABASE_URL"].startswith("postgresql://sagacity:")
    assert "SAGACITY_DATABASE_URL" not in migrate_env
    for name in ("worker", "approvals"):
        url = services[name]["environment"]["SAGACITY_DATABASE_URL"]
        assert url.startswith("postgresql://sagacity_app:"), name

    (job,) = k8s("Job", "sagacity-migrate")["spec"]["template"]["spec"]["containers"]
    assert _env(job)["SAGACITY_OWNER_DATABASE_URL"]["secretKeyRef"]["key"] == "owner-database-url"
    for kind, name in (("Deployment", "sagacity-worker"), ("Deployment", "sagacity-approvals")):
        (container,) = k8s(kind, name)["spec"]["template"]["spec"]["containers"]
        assert _env(container)["SAGACITY_DATABASE_URL"]["secretKeyRef"]["key"] == (
            "app-database-url"
        ), name

    # every container is production: a worker whose login can rewrite the journal refuses
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^\s+SAGACITY_PRODUCTION=true", dockerfile, flags=re.MULTILINE)
    assert "SAGACITY_ALLOW_WRITABLE_JOURNAL" not in (DEPLOY / "compose.yaml").read_text()


def test_workers_sign_checkpoints_with_a_key_and_a_folder_on_volumes_of_their_own() -> None:
    worker = compose()["services"]["worker"]
    env = worker["environment"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in worker["volumes"]}
    key, folder = Path(env["SAGACITY_SIGNING_KEY"]), env["SAGACITY_CHECKPOINT_DIR"]
    assert mounts[str(key.parent)] == "sagacity-keys"
    assert mounts[folder] == "sagacity-checkpoints"
    assert "postgres-data" not in mounts.values()
    keys_job = compose()["services"]["keys"]["command"][-1]
    assert f"sagacity keygen {key}" in keys_job
    assert worker["depends_on"]["keys"]["condition"] == "service_completed_successfully"

    pod = k8s("Deployment", "sagacity-worker")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    key = Path(env["SAGACITY_SIGNING_KEY"])
    assert volumes[mounted[str(key.parent)]]["secret"]["secretName"] == "sagacity-signing-key"
    assert key.name in k8s("Secret", "sagacity-signing-key")["stringData"]
    claim = volumes[mounted[env["SAGACITY_CHECKPOINT_DIR"]]]["persistentVolumeClaim"]
    assert claim["claimName"] == "sagacity-checkpoints"
    assert k8s("PersistentVolumeClaim", "sagacity-checkpoints")["spec"]["accessModes"] == [
        "ReadWriteMany"
    ]


def test_verifiers_trust_a_key_pinned_in_a_volume_no_worker_mounts() -> None:
    services = compose()["services"]
    audit = services["audit"]
    trust = Path(audit["environment"]["SAGACITY_TRUST_FILE"])
    mounts = {m.split(":")[1]: m for m in audit["volumes"]}
    assert mounts[str(trust.parent)] == f"sagacity-trust:{trust.parent}:ro"
    assert all(m.endswith(":ro") for m in audit["volumes"])
    assert f"sagacity trust init {trust}" in services["keys"]["command"][-1]
    for name, service in services.items():
        env = service.get("environment") or {}
        # a public key beside the workers' key is no trust root: no service is handed one
        assert "SAGACITY_CHECKPOINT_PUBLIC_KEY" not in env, name
        if name not in ("audit", "keys"):
            volumes = [str(v).split(":")[0] for v in service.get("volumes") or []]
            assert "sagacity-trust" not in volumes, name


async def test_workers_key_redaction_fingerprints_with_a_key_the_deployment_makes(
    sagacity: Cli, tmp_path: Path
) -> None:
    worker = compose()["services"]["worker"]
    key = Path(worker["environment"]["SAGACITY_REDACT_KEY"])
    mounts = {m.split(":")[1]: m.split(":")[0] for m in worker["volumes"]}
    assert mounts[str(key.parent)] == "sagacity-keys"
    keys_job = compose()["services"]["keys"]["command"][-1]
    assert f"sagacity keygen --fingerprint {key}" in keys_job
    # the command the job runs makes a key the worker's settings load
    made = await sagacity("keygen", "--fingerprint", str(tmp_path / "fingerprint-key"))
    assert made.code == 0, made.stderr
    loaded = load_settings(redact_key=tmp_path / "fingerprint-key").redactor().key
    assert loaded is not None and f"key id:          {loaded.id}" in made.stdout

    pod = k8s("Deployment", "sagacity-worker")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    path = Path(_env(container)["SAGACITY_REDACT_KEY"])
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    secret = {v["name"]: v for v in pod["volumes"]}[mounted[str(path.parent)]]["secret"]
    assert path.name in k8s("Secret", secret["secretName"])["stringData"]


def test_workers_check_decisions_against_a_keyring_and_the_api_signs_with_its_own_key() -> None:
    services = compose()["services"]
    worker, api = services["worker"], services["approvals"]
    keyring = Path(worker["environment"]["SAGACITY_KEYRING"])
    mounts = {m.split(":")[1]: m.split(":")[0] for m in worker["volumes"]}
    assert mounts[str(keyring.parent)] == "sagacity-decisions"
    assert api["environment"]["SAGACITY_KEYRING"] == str(keyring)
    assert Path(api["environment"]["SAGACITY_SERVICE_KEY"]).parent == keyring.parent
    assert f"sagacity keyring init {keyring.parent}" in services["keys"]["command"][-1]
    assert api["depends_on"]["keys"]["condition"] == "service_completed_successfully"
    for name in ("worker", "approvals"):
        assert services[name]["environment"]["SAGACITY_APPROVERS"], name

    config = k8s("ConfigMap", "sagacity-config")["data"]
    keyring = Path(config["SAGACITY_KEYRING"])
    assert config["SAGACITY_APPROVERS"] and config["SAGACITY_RESOLVERS"]
    secret = k8s("Secret", "sagacity-decision-keys")["stringData"]
    for kind, name in (("Deployment", "sagacity-worker"), ("Deployment", "sagacity-approvals")):
        pod = k8s(kind, name)["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volume = {v["name"]: v for v in pod["volumes"]}[mounted[str(keyring.parent)]]
        assert volume["secret"]["secretName"] == "sagacity-decision-keys"
        assert keyring.name in secret
    worker_volume = next(
        v
        for v in k8s("Deployment", "sagacity-worker")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "decision-keys"
    )
    # the worker gets the keyring only; the service key stays with the API
    assert [i["key"] for i in worker_volume["secret"]["items"]] == [keyring.name]
    (api_container,) = k8s("Deployment", "sagacity-approvals")["spec"]["template"]["spec"][
        "containers"
    ]
    service_key = Path(_env(api_container)["SAGACITY_SERVICE_KEY"])
    assert service_key.parent == keyring.parent and service_key.name in secret


def test_workers_and_the_approvals_api_hold_the_payload_codec_keys() -> None:
    services = compose()["services"]
    keys_job = services["keys"]["command"][-1]
    for name in ("worker", "approvals"):
        service = services[name]
        path = Path(service["environment"]["SAGACITY_CODEC_KEYS_FILE"])
        mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"]}
        assert mounts[str(path.parent)] == "sagacity-codec", name
        assert service["depends_on"]["keys"]["condition"] == "service_completed_successfully"
        assert f"> {path}" in keys_job
    assert services["approvals"]["environment"]["SAGACITY_CODEC_DECODERS"]
    # the internet-facing API holds neither the checkpoint signing key nor the fingerprint key
    api_volumes = {m.split(":")[0] for m in services["approvals"]["volumes"]}
    assert "sagacity-keys" not in api_volumes

    secret = k8s("Secret", "sagacity-secrets")["stringData"]
    assert "codec-keys" in secret
    for name in ("sagacity-worker", "sagacity-approvals"):
        (container,) = k8s("Deployment", name)["spec"]["template"]["spec"]["containers"]
        assert _env(container)["SAGACITY_CODEC_KEYS"]["secretKeyRef"]["key"] == "codec-keys"
