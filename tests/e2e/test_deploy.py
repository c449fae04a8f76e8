"""The deploy files (deploy/), checked here since no cluster and no Docker engine runs in CI.

- Kubernetes manifests are validated against the Kubernetes JSON schemas that the pinned
  `kubernetes-validate` package ships, in strict mode (an unknown or misplaced field fails),
  for the oldest and the newest Kubernetes version we claim.
- The compose file is validated against the Compose Specification schema vendored by the pinned
  `check-jsonschema`, then for what we rely on (two gateways, append-only Redis, healthchecks,
  the `fake` profile).
- The Dockerfile cannot be built here, so its build stage is replayed: the files it COPYs make a
  temporary build context, its only RUN (`deploy/install.sh`) installs the gateway there, and
  the installed gateway then runs the image's command and health check against a real store.
- Cross-references: every variable the config reads is provided, probes hit the real routes,
  flags are real CLI flags, selectors match, and nothing secret-looking is committed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate
import pytest
import yaml

from gateway import cli
from gateway.config import load_config
from gateway.config.loader import ENV_REF
from gateway.http.routes import routes

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
EXAMPLE_CONFIG = DEPLOY / "config.example.yaml"
KUBERNETES_VERSIONS = ["1.30", "1.37"]  # oldest and newest we claim; schemas ship pinned
IMAGE_UID = 10001


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifests() -> dict[str, dict[str, Any]]:
    """kind -> object, over every Kubernetes manifest (one object per kind here)."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_all(path):
            if doc["kind"] != "Kustomization":
                assert doc["kind"] not in objects, f"two {doc['kind']} objects"
                objects[doc["kind"]] = doc
    return objects


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def container() -> dict[str, Any]:
    [gateway] = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return gateway


def config_variables() -> tuple[set[str], set[str]]:
    """(required, optional) environment variables that deploy/config.example.yaml reads."""
    data = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    references = [m for value in _strings(data) for m in ENV_REF.finditer(value)]
    required = {m.group(1) for m in references if m.group(2) is None}
    optional = {m.group(1) for m in references if m.group(2) is not None}
    for tenant in data["tenants"].values():
        required |= {key["env"] for key in tenant["api_keys"] if "env" in key}
        required |= {m["api_key_env"] for m in tenant["models"].values() if "api_key_env" in m}
    return required, optional


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def secret_values() -> dict[str, str]:
    return manifests()["Secret"]["stringData"]


# -- Dockerfile --------------------------------------------------------------------------------

def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", "", (DEPLOY / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def instructions(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [arguments for instruction, arguments in stage if instruction == name]


def exec_form(arguments: str) -> list[str]:
    """The JSON array of an exec-form instruction (`CMD [...]`, `HEALTHCHECK ... CMD [...]`)."""
    return json.loads(arguments[arguments.index("["):])


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for arguments in instructions(dockerfile_stages()[-1], "ENV"):
        env.update(dict(pair.split("=", 1) for pair in arguments.split()))
    return env


# -- the manifests -----------------------------------------------------------------------------

def test_every_deploy_yaml_file_parses():
    files = sorted(DEPLOY.rglob("*.y*ml"))
    assert len(files) >= 9
    for path in files:
        assert load_all(path), f"{path} is empty"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", sorted(p.name for p in K8S.glob("*.yaml")
                                        if p.name != "kustomization.yaml"))
def test_kubernetes_manifest_matches_the_pinned_schema(path: str, version: str):
    for doc in load_all(K8S / path):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path} ({doc['kind']}) is invalid for Kubernetes {version}: "
                        f"{exc.message} at {'.'.join(map(str, exc.path))}")


def test_the_schema_check_rejects_a_misspelled_field():
    deployment = manifests()["Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_kustomization_applies_every_manifest_except_the_secret_template():
    [kustomization] = load_all(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    # Applying the manifests must never overwrite the real Secret with placeholders.
    assert listed == on_disk - {"secret.example.yaml"}


def test_configmap_holds_the_example_config_verbatim():
    assert manifests()["ConfigMap"]["data"]["config.yaml"] == EXAMPLE_CONFIG.read_text()


def test_example_config_passes_check_config(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]):
    required, optional = config_variables()
    for name in required | optional:
        monkeypatch.delenv(name, raising=False)
    for name, value in secret_values().items():  # exactly what the pods get
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["check-config", str(EXAMPLE_CONFIG)])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert load_config(EXAMPLE_CONFIG).store == "redis://redis:6379/0"


def test_every_variable_the_config_reads_is_provided_by_the_secret_and_compose():
    required, _ = config_variables()
    assert {"GATEWAY_STORE", "ACME_GATEWAY_KEY", "OPENAI_API_KEY", "FAKE_KEY"} <= required
    assert required <= set(secret_values())
    for name, service in compose()["services"].items():
        if service["command"][0] == "serve":
            assert required <= set(service["environment"]), name


def test_deployment_uses_the_configmap_and_secret_that_exist():
    objects, gateway = manifests(), container()
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    [config_volume] = [v for v in pod["volumes"] if "configMap" in v]
    assert config_volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    [mount] = [m for m in gateway["volumeMounts"] if m["name"] == config_volume["name"]]
    config_path = gateway["args"][gateway["args"].index("--config") + 1]
    assert config_path == f"{mount['mountPath']}/config.yaml"
    assert [e["secretRef"]["name"] for e in gateway["envFrom"]] == \
        [objects["Secret"]["metadata"]["name"]]


def test_probes_point_to_healthz_and_readyz():
    gateway = container()
    paths = {route.path for route in routes}
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Liveness checks the process only: a Redis outage must not restart every replica.
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/readyz", "/healthz", "/metrics"} <= paths
    port_names = {p["name"] for p in gateway["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert gateway[probe]["httpGet"]["port"] in port_names


def test_pods_run_as_the_images_non_root_user_on_a_read_only_root():
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    gateway = container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == IMAGE_UID
    assert gateway["securityContext"] == {"allowPrivilegeEscalation": False,
                                          "readOnlyRootFilesystem": True,
                                          "capabilities": {"drop": ["ALL"]}}
    [tmp] = [m for m in gateway["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])


def test_service_hpa_and_pdb_select_the_deployments_pods():
    objects = manifests()
    deployment = objects["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selectors = [objects["Service"]["spec"]["selector"],
                 objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
                 deployment["spec"]["selector"]["matchLabels"]]
    for selector in selectors:
        assert selector.items() <= labels.items()
    target = objects["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert objects["Service"]["spec"]["ports"][0]["targetPort"] in \
        {p["name"] for p in container()["ports"]}


def _flags(capsys: pytest.CaptureFixture[str], command: str) -> set[str]:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return set(re.findall(r"--[a-z-]+", capsys.readouterr().out))


def test_commands_use_real_cli_flags(capsys: pytest.CaptureFixture[str]):
    commands = [container()["args"], exec_form(instructions(dockerfile_stages()[-1], "CMD")[0])]
    commands += [service["command"] for service in compose()["services"].values()
                 if service.get("image") == compose()["services"]["gateway-1"]["image"]]
    assert len(commands) == 5
    for command in commands:
        flags = _flags(capsys, command[0])
        assert {a for a in command if a.startswith("--")} <= flags, command


# -- compose -----------------------------------------------------------------------------------

def test_compose_file_matches_the_compose_specification():
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(DEPLOY / "docker-compose.yml")], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_check_rejects_a_misspelled_field(tmp_path: Path):
    broken = compose()
    broken["services"]["redis"]["healtcheck"] = broken["services"]["redis"].pop("healthcheck")
    (tmp_path / "compose.yml").write_text(yaml.safe_dump(broken))
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(tmp_path / "compose.yml")], check=False, capture_output=True, text=True)
    assert result.returncode == 1 and "healtcheck" in result.stdout + result.stderr


def test_compose_runs_two_gateways_on_one_append_only_redis():
    services = compose()["services"]
    gateways = {n: s for n, s in services.items() if s["command"][0] == "serve"}
    assert len(gateways) == 2
    host_ports = {p.split(":")[0] for s in gateways.values() for p in s["ports"]}
    assert len(host_ports) == 2
    for service in gateways.values():
        assert service["environment"]["GATEWAY_STORE"].startswith("redis://redis:")
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    redis = services["redis"]["command"]
    assert redis[redis.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    for name, service in services.items():
        assert "healthcheck" in service, name
        assert ("profiles" in service) == (name == "fake-upstream"), name


def test_compose_fake_profile_serves_the_example_configs_fake_model():
    fake = compose()["services"]["fake-upstream"]
    assert fake["profiles"] == ["fake"]
    port = fake["command"][fake["command"].index("--port") + 1]
    # The compose gateways leave FAKE_UPSTREAM_URL unset, so the config's default applies.
    default = re.search(r"\$\{FAKE_UPSTREAM_URL:-([^}]*)\}", EXAMPLE_CONFIG.read_text())
    assert default is not None and default.group(1) == f"http://fake-upstream:{port}/v1"


# -- Dockerfile --------------------------------------------------------------------------------

def test_dockerfile_is_slim_non_root_offline_and_healthchecked():
    build, runtime = dockerfile_stages()
    base = instructions(build, "FROM")[0].split()[0]
    assert "slim" in base and instructions(runtime, "FROM") == [base]
    assert instructions(runtime, "USER") == [f"{IMAGE_UID}:{IMAGE_UID}"]
    env = image_env()
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["HF_HUB_OFFLINE"] == "1"
    [healthcheck] = instructions(runtime, "HEALTHCHECK")
    assert "/healthz" in exec_form(healthcheck)[-1]


def test_dockerfile_build_context_is_allowed_by_its_dockerignore():
    ignore = [line for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in dockerfile_stages():
        for arguments in instructions(stage, "COPY"):
            if not arguments.startswith("--from"):
                assert set(arguments.split()[:-1]) <= allowed, arguments


SECRET_PATTERNS = re.compile(r"sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{20,}"
                             r"|xox[bp]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY")


def test_no_secret_looking_literal_is_committed():
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        assert not SECRET_PATTERNS.search(path.read_text()), path
    for name, value in secret_values().items():
        assert "PLACEHOLDER" in value or re.fullmatch(r"redis://[^:@]+:\d+/\d+", value), name


# -- the image's build stage, replayed outside Docker ------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ok(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert process.poll() is None, f"the process serving {url} exited"
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout} s"
            time.sleep(0.1)


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    try:
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _replay_build_stage(context: Path, venv: Path) -> None:
    """Copy what the build stage COPYs into `context`, then run its RUN instructions there,
    with the image's venv path (/opt/venv) moved to `venv`."""
    build = dockerfile_stages()[0]
    [workdir] = instructions(build, "WORKDIR")
    for arguments in instructions(build, "COPY"):
        *sources, target = arguments.split()
        for source in sources:
            destination = context / Path(target if not target.endswith("/") else
                                         f"{target}{Path(source).name}")
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, destination,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, destination)
    assert workdir == "/src"
    assert instructions(build, "RUN") == ["deploy/install.sh /opt/venv"]
    # As a fresh shell would: python3 is the machine's, not the venv running this test.
    path = [p for p in os.environ["PATH"].split(os.pathsep)
            if Path(p).resolve() != Path(sys.prefix, "bin").resolve()]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run(["deploy/install.sh", str(venv)], cwd=context, check=True, timeout=300,
                   env={**env, "PATH": os.pathsep.join(path)})


def test_image_build_stage_replayed_outside_docker_serves_the_example_config(
        tmp_path: Path, redis_url: str, running: list[subprocess.Popen[bytes]]):
    venv, home = tmp_path / "venv", tmp_path / "home"
    _replay_build_stage(tmp_path / "src", venv)
    home.mkdir()
    installed = subprocess.run(
        [venv / "bin/python", "-c", "import gateway; print(gateway.__file__)"],
        cwd=home, capture_output=True, text=True, check=True).stdout
    assert installed.startswith(str(venv)), "the image must not depend on a source tree"

    runtime = dockerfile_stages()[-1]
    env = {**image_env(), **secret_values(), "GATEWAY_STORE": redis_url,
           "PATH": f"{venv}/bin:{os.environ['PATH']}", "HOME": str(home)}
    fake_port, port = _free_port(), _free_port()
    fake_command = compose()["services"]["fake-upstream"]["command"]
    fake_command = [{"0.0.0.0": "127.0.0.1", "9000": str(fake_port)}.get(a, a)
                    for a in fake_command]
    running.append(subprocess.Popen([venv / "bin/gateway", *fake_command], cwd=home, env=env))
    env["FAKE_UPSTREAM_URL"] = f"http://127.0.0.1:{fake_port}/v1"
    # The image's own command, with the mounted config and a free loopback port.
    command = [{"/etc/gateway/config.yaml": str(EXAMPLE_CONFIG), "0.0.0.0": "127.0.0.1",
                "8080": str(port)}.get(a, a) for a in exec_form(instructions(runtime, "CMD")[0])]
    [entrypoint] = exec_form(instructions(runtime, "ENTRYPOINT")[0])
    running.append(subprocess.Popen([venv / "bin" / entrypoint, *command], cwd=home, env=env))
    base = f"http://127.0.0.1:{port}"
    _wait_ok(f"{base}/readyz", running[-1])
    _wait_ok(f"http://127.0.0.1:{fake_port}/healthz", running[0])

    [healthcheck] = instructions(runtime, "HEALTHCHECK")
    probe = [a.replace("127.0.0.1:8080", f"127.0.0.1:{port}") for a in exec_form(healthcheck)]
    subprocess.run(probe, cwd=home, env=env, check=True, timeout=30)

    request = urllib.request.Request(
        f"{base}/v1/chat/completions", method="POST",
        data=json.dumps({"model": "echo",
                         "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": f"Bearer {env['ACME_GATEWAY_KEY']}",
                 "X-Conversation-Id": "deploy-smoke", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.load(response)
    assert reply["choices"][0]["message"]["content"] == "hi"
