"""The Kubernetes launch, offline: the production instance config loads as a DagsterInstance
(K8sRunLauncher with a dummy kubeconfig, storage on the stack's Postgres), the run Job the
launcher would create for a backfill run is rendered with dagster-k8s and validated against
Kubernetes' schema, and its pod gets every variable the instance and the Spark profile need.
The Spark-on-Kubernetes side (executor pod from the template and the resolved profile, the
service account and RBAC) is rendered and validated the same way.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dagster as dg
import kubernetes
import kubernetes_validate
import pytest
import yaml
from dagster_k8s import K8sRunLauncher, construct_dagster_k8s_job
from dagster_k8s.container_context import K8sContainerContext
from dagster_k8s.job import get_job_name_from_run_id

from backfill_assets.core.spark.session import spark_config, unresolved_variables
from backfill_assets.definitions import build_definitions
from backfill_assets.release.keys import layer_keys
from backfill_assets.settings import PROJECT_ROOT, Settings

K8S_VERSION = "1.31.0"
DEPLOY = PROJECT_ROOT / "deploy"
NAMESPACE = "backfill"
RUN_IMAGE = "registry.example.com/backfill-assets:0.1.0"
# What the daemon pod is deployed with (Helm values / ConfigMap backfill-assets-env).
DAEMON_ENV = {
    "DAGSTER_K8S_NAMESPACE": NAMESPACE,
    "DAGSTER_RUN_IMAGE": RUN_IMAGE,
    "DAGSTER_LOG_BUCKET": "backfill-assets-dagster-logs",
    "BACKFILL_ENV": "production",
    "BACKUP_ROOT": "s3://backups/web",
    "DATA_ROOT": "s3://warehouse/backfill",
    "SPARK_MASTER": "k8s://https://kubernetes.default.svc",
    "SPARK_IMAGE": RUN_IMAGE,
    "SPARK_NAMESPACE": NAMESPACE,
    "SPARK_SERVICE_ACCOUNT": "backfill-assets-run",
    "SPARK_EXECUTOR_INSTANCES": "4",
    "HIVE_METASTORE_URIS": "thrift://hive-metastore.backfill.svc:9083",
    "AWS_DEFAULT_REGION": "eu-west-1",
}
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: offline, user: {token: not-a-real-token}}]
contexts: [{name: offline, context: {cluster: offline, user: offline, namespace: backfill}}]
current-context: offline
"""


def env_references(node: Any) -> set[str]:
    """Every ``{env: NAME}`` of a Dagster instance config."""
    if isinstance(node, dict):
        if set(node) == {"env"}:
            return {node["env"]}
        return set().union(*(env_references(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(env_references(v) for v in node))
    return set()


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


@pytest.fixture
def instance(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch):
    """deploy/dagster.production.yaml as a DagsterInstance, outside a cluster."""
    for name, value in DAEMON_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_POSTGRES_URL", f"{postgres_url}/dagster")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    config = yaml.safe_load((DEPLOY / "dagster.production.yaml").read_text())
    # The only change for running outside a pod (documented in the file).
    config["run_launcher"]["config"].update(
        load_incluster_config=False, kubeconfig_file=str(kubeconfig)
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(home)) as loaded:
        yield loaded


def render_run_job(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dict:
    """The Job ``K8sRunLauncher.launch_run`` creates for ``run`` (same dagster-k8s calls)."""
    launcher = instance.run_launcher
    assert isinstance(launcher, K8sRunLauncher)
    context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=True)
    job_name = get_job_name_from_run_id(run.run_id)
    job = construct_dagster_k8s_job(
        job_config=context.get_k8s_job_config(job_image=None, run_launcher=launcher),
        args=["dagster", "api", "execute_run", "{serialized run args}"],
        job_name=job_name,
        pod_name=job_name,
        component="run_worker",
        user_defined_k8s_config=context.run_k8s_config,
        labels={"dagster/job": run.job_name, "dagster/run-id": run.run_id},
        env_vars=[{"name": "DAGSTER_RUN_JOB_NAME", "value": run.job_name}],
    )
    manifest = kubernetes.client.ApiClient().sanitize_for_serialization(job)
    manifest["metadata"]["namespace"] = context.namespace
    return manifest


def pod_environment(container: dict, job_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would fill it (fields of the pod)."""
    fields = {"status.podIP": "10.1.2.3", "metadata.name": job_name}
    env = {}
    for item in container["env"]:
        source = item.get("valueFrom", {})
        if "value" in item:
            env[item["name"]] = item["value"]
        elif "fieldRef" in source:
            env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            env[item["name"]] = f"<secret {source['secretKeyRef']['name']}>"
    return env


@pytest.fixture
def run_job(instance: dg.DagsterInstance, tmp_path: Path) -> dict:
    """The rendered Job of a raw backfill run over four hours."""
    settings = Settings.from_env({**DAEMON_ENV, "DAGSTER_HOME": str(tmp_path)})
    defs = build_definitions(settings)
    job = defs.resolve_implicit_global_asset_job_def()
    run = instance.create_run_for_job(
        job_def=job,
        asset_selection=frozenset(layer_keys(defs, "raw")),
        tags={
            "dagster/asset_partition_range_start": "2026-11-20T00",
            "dagster/asset_partition_range_end": "2026-11-20T03",
            "backfill_assets/layer": "raw",
        },
    )
    try:
        return render_run_job(instance, run)
    finally:
        # never launched: a run left NOT_STARTED in the stack's storage would hold its
        # hours for every later release there (one release per hour at a time)
        instance.delete_run(run.run_id)


def test_production_instance_loads_with_kubernetes_launcher_and_postgres(instance):
    assert isinstance(instance.run_launcher, K8sRunLauncher)
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(instance.compute_log_manager).__name__ == "S3ComputeLogManager"
    assert instance.event_log_storage.supports_global_concurrency_limits
    # A run whose pod died is marked failed by the daemon (sensors/orphans.py relies on it).
    assert instance.run_monitoring_enabled


def test_run_job_is_valid_and_its_pod_has_every_variable_needed(run_job: dict):
    validate(run_job)
    assert run_job["kind"] == "Job" and run_job["metadata"]["namespace"] == NAMESPACE
    pod = run_job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "backfill-assets-run"
    (container,) = pod["containers"]
    assert container["image"] == RUN_IMAGE
    env = pod_environment(container, run_job["metadata"]["name"])
    # Every {env: ...} of the instance config (the run pod loads the same instance) ...
    instance_config = yaml.safe_load((DEPLOY / "dagster.production.yaml").read_text())
    needed = env_references(instance_config)
    assert {"DAGSTER_POSTGRES_URL", "DAGSTER_LOG_BUCKET"} <= needed
    # ... every variable the production Spark profile requires, and the settings.
    profile = spark_config(Settings.from_env({"BACKFILL_ENV": "production"}), env={}, resolve=False)
    needed |= set(unresolved_variables(profile))
    needed |= {"BACKFILL_ENV", "BACKUP_ROOT", "DATA_ROOT", "DAGSTER_HOME"}
    assert needed - set(env) == set(), f"missing in the run pod: {sorted(needed - set(env))}"
    assert env["DAGSTER_POSTGRES_URL"] == "<secret backfill-assets-postgres>"
    # Erasure digests in runs match the CLI's: the salt is a Secret, in every run pod.
    assert env["BACKFILL_ERASURE_SALT"] == "<secret backfill-assets-erasure>"
    assert env["SPARK_DRIVER_HOST"] == "10.1.2.3"  # executors call back to the run pod
    assert env["BACKFILL_ENV"] == "production"
    # The instance reaches the pod as the run's instance ref (in the args), whose {env: ...}
    # the pod resolves from the variables checked above.
    assert env["DAGSTER_HOME"] == "/opt/dagster/dagster_home"


def test_spark_executor_pods_render_from_the_profile_and_template(run_job: dict):
    (container,) = run_job["spec"]["template"]["spec"]["containers"]
    env = pod_environment(container, run_job["metadata"]["name"])
    settings = Settings.from_env(env)
    conf = spark_config(settings, env=env)  # resolved exactly as in the run pod
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc"
    assert conf["spark.kubernetes.container.image"] == container["image"]
    assert conf["spark.kubernetes.namespace"] == run_job["metadata"]["namespace"]
    assert conf["spark.kubernetes.driver.pod.name"] == run_job["metadata"]["name"]
    assert conf["spark.sql.warehouse.dir"] == "s3a://warehouse/backfill/warehouse"
    account = conf["spark.kubernetes.authenticate.executor.serviceAccountName"]
    template_path = conf["spark.kubernetes.executor.podTemplateFile"]
    assert template_path.endswith("/deploy/spark/executor-pod-template.yaml")
    template = yaml.safe_load((DEPLOY / "spark" / "executor-pod-template.yaml").read_text())
    validate(template)
    # What Spark adds to the template for each executor (its Kubernetes scheduler backend).
    executor = yaml.safe_load(yaml.safe_dump(template))
    executor["metadata"].update(
        name=f"{conf['spark.kubernetes.executor.podNamePrefix']}-exec-1",
        namespace=conf["spark.kubernetes.namespace"],
        ownerReferences=[
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": conf["spark.kubernetes.driver.pod.name"],
                "uid": "00000000-0000-0000-0000-000000000000",
                "controller": True,
            }
        ],
    )
    executor["spec"]["serviceAccountName"] = account
    memory = re.fullmatch(r"(\d+)g", conf["spark.executor.memory"])
    assert memory, conf["spark.executor.memory"]
    main = executor["spec"]["containers"][0]
    main.update(
        image=conf["spark.kubernetes.container.image"],
        imagePullPolicy=conf["spark.kubernetes.container.image.pullPolicy"],
        args=["executor"],
        resources={
            "requests": {
                "cpu": conf["spark.executor.cores"],
                "memory": f"{int(memory.group(1)) * 1024 + 1024}Mi",  # + memory overhead
            },
        },
    )
    main["env"] = [
        *main["env"],
        {
            "name": "SPARK_DRIVER_URL",
            "value": f"spark://CoarseGrainedScheduler@{env['SPARK_DRIVER_HOST']}:7078",
        },
    ]
    validate(executor)
    rbac = list(yaml.safe_load_all((DEPLOY / "k8s" / "backfill-assets-run.yaml").read_text()))
    for manifest in rbac:
        validate(manifest)
    accounts = {m["metadata"]["name"] for m in rbac if m["kind"] == "ServiceAccount"}
    assert {account, run_job["spec"]["template"]["spec"]["serviceAccountName"]} <= accounts
    (role,) = [m for m in rbac if m["kind"] == "Role"]
    assert {"create", "delete", "watch"} <= set(role["rules"][0]["verbs"])
    assert "pods" in role["rules"][0]["resources"]


def test_helm_values_match_the_instance_config():
    values = yaml.safe_load((DEPLOY / "helm" / "values.yaml").read_text())
    instance_config = yaml.safe_load((DEPLOY / "dagster.production.yaml").read_text())
    launcher = instance_config["run_launcher"]["config"]
    helm = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert helm["envVars"] == launcher["env_vars"]
    assert [e["name"] for e in helm["runK8sConfig"]["containerConfig"]["env"]] == [
        e["name"] for e in launcher["run_k8s_config"]["container_config"]["env"]
    ]
    assert (
        helm["runK8sConfig"]["podSpecConfig"]["serviceAccountName"]
        == (launcher["service_account_name"])
    )
    pools = instance_config["concurrency"]["pools"]
    assert values["concurrency"]["pools"] == {
        "defaultLimit": pools["default_limit"],
        "granularity": pools["granularity"],
    }
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    monitoring = instance_config["run_monitoring"]
    assert values["dagsterDaemon"]["runMonitoring"] == {
        "enabled": monitoring["enabled"],
        "startTimeoutSeconds": monitoring["start_timeout_seconds"],
        "maxResumeRunAttempts": monitoring["max_resume_run_attempts"],
        "pollIntervalSeconds": monitoring["poll_interval_seconds"],
    }
    assert values["computeLogManager"]["type"] == "S3ComputeLogManager"
    s3_logs = values["computeLogManager"]["config"]["s3ComputeLogManager"]
    logs = instance_config["compute_logs"]["config"]
    assert (s3_logs["bucket"], s3_logs["prefix"], s3_logs["localDir"]) == (
        DAEMON_ENV["DAGSTER_LOG_BUCKET"],
        logs["prefix"],
        logs["local_dir"],
    )
    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    runs = instance_config["concurrency"]["runs"]
    assert queue["maxConcurrentRuns"] == runs["max_concurrent_runs"]
    # a paused release's queued runs are held in both (backfill-assets pause)
    assert queue["tagConcurrencyLimits"] == runs["tag_concurrency_limits"]
