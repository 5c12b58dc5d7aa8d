"""`recrun pipeline cluster=k8s`: the pipeline's steps as an Argo Workflow (or a CronWorkflow
that starts one on `pipeline.schedule`).

    [warmup] -> data -> train -> gate -> release -> smoke -> promote [-> full traffic]
    on exit: remove the PaddleJob (and so its pods), report the outcome

- warmup, train, release and full traffic are `resource` templates: the SampleJob (waits on
  its status.phase Succeeded/Failed), the PaddleJob (Completed / Failed, Aborted; a retry
  deletes the failed job first and resumes from the checkpoint on the volume: the pods run
  with runner.resume=true) and the serving resource.
- data, gate, smoke, promote and the report are containers running `recrun pipeline --step`
  in the training image, on the same ConfigMap-mounted config and model volume.
- Each workflow run has its own output folder, `<pod output dir>/runs/{{workflow.name}}`
  (one folder, one pipeline run, as on this machine). The champion is the folder the promote
  step publishes to (serving.model_dir, or `<pod output dir>/served`); the serving resource
  serves the run's own export, so a new revision starts on it: KServe sends it
  `pipeline.canary_percent` of the traffic until the smoke step passes, then all of it;
  ElasticServing's PaddleService replaces the served model.
- A mutex named after the job keeps two runs from sharing the PaddleJob.

Plain data rather than Argo's `hera` SDK: every other document recrunner renders is plain data
from the config, checked against the full upstream CRD (here Argo's v4.1 Workflow schema,
unknown fields refused); hera's generated models would add a second description of the same
schema (and pydantic) without checking more.
"""

import copy
from pathlib import PurePosixPath
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.config.serving import ServingKind
from recrunner.errors import RecrunnerError
from recrunner.k8s import manifests, rbac
from recrunner.k8s import serving as serving_k8s
from recrunner.k8s.kinds import ARGO_API
from recrunner.k8s.manifests import Doc, Names

RUN = "{{workflow.name}}"  # Argo fills it in: each run's own folder
COMPONENT = "pipeline"
TAG_ROUTING = "serving.kserve.io/enable-tag-routing"
SAMPLESET_VOLUME = "sampleset"


def pod_out(cfg: RootConfig) -> PurePosixPath:
    return PurePosixPath(manifests.pod_config(cfg).runner.output_dir)


def run_dir(cfg: RootConfig) -> str:
    return str(pod_out(cfg) / "runs" / RUN)


def champion_dir(cfg: RootConfig) -> str:
    """Where promote publishes: serving.model_dir when it is on the model volume."""
    mount = PurePosixPath(cfg.cluster.juicefs.mount_path)
    given = cfg.serving.model_dir
    if given and PurePosixPath(given).is_absolute() and mount in PurePosixPath(given).parents:
        return given
    if given:
        raise RecrunnerError(
            f"serving.model_dir={given} is not on the model volume (below "
            f"cluster.juicefs.mount_path={mount}): the workflow's pods could not reach it; "
            "leave it unset (<output dir>/served) or put it below the mount")
    return str(pod_out(cfg) / "served")


def serving_host(cfg: RootConfig, names: Names) -> str:
    """The in-cluster address the smoke step reaches the new model at: Knative's service of
    the PaddleService, or KServe's tag route to the latest (canary) revision."""
    ns = serving_k8s.namespace(cfg)
    if cfg.serving.k8s.kind == ServingKind.InferenceService:
        return f"latest-{names.serving}-predictor.{ns}.svc.cluster.local"
    return f"{names.serving}.{ns}.svc.cluster.local"


def step_args(cfg: RootConfig, names: Names, step: str) -> list[str]:
    """The overrides a container step runs with (on top of the ConfigMap's config)."""
    args = [f"runner.output_dir={run_dir(cfg)}"]
    if step == "gate":
        args.append(f"serving.model_dir={champion_dir(cfg)}")
    elif step == "smoke":
        args += [f"serving.model_dir={run_dir(cfg)}/export",
                 f"serving.host={serving_host(cfg, names)}", "serving.port=80"]
    elif step == "promote":
        args.append(f"serving.model_dir={champion_dir(cfg)}")
    return args


def config_path(cfg: RootConfig) -> str:
    return f"{cfg.cluster.config_mount_path.rstrip('/')}/{manifests.CONFIG_FILE}"


def recrun_template(cfg: RootConfig, names: Names, name: str, argv: list[str]) -> dict[str, Any]:
    """A container template: `recrun <argv>` as the training pods run, restricted."""
    template = manifests.pod_template(cfg, names, "worker")
    container = copy.deepcopy(template["spec"]["containers"][0])
    container["name"] = "main"  # Argo's name for a template's container
    container["command"] = ["recrun", *argv]
    # No /dev/shm: only training's DataLoader workers use it.
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "dshm"]
    if names.sampleset:  # the data steps read the cached data where the trainers do
        container["volumeMounts"].append({"name": SAMPLESET_VOLUME, "readOnly": True,
                                          "mountPath": cfg.dataset.sampleset.mount_path})
    return {"name": name, "metadata": {"labels": manifests.labels(names, COMPONENT)},
            "container": container}


def step_template(cfg: RootConfig, names: Names, step: str) -> dict[str, Any]:
    argv = ["pipeline", "--step", step, "--workflow", "--config-file", config_path(cfg),
            *step_args(cfg, names, step)]
    return recrun_template(cfg, names, step, argv)


def resource(name: str, action: str, doc: dict[str, Any], *, success: str | None = None,
             failure: str | None = None, flags: list[str] | None = None,
             owned: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, "manifest": manifests.dump(doc)}
    if success:
        spec["successCondition"] = success
    if failure:
        spec["failureCondition"] = failure
    if flags:
        spec["flags"] = flags
    if owned:  # deleted with the Workflow
        spec["setOwnerReference"] = True
    return {"name": name, "resource": spec}


def reference(doc: dict[str, Any]) -> dict[str, Any]:
    """Just enough of a document to name it (what a delete needs)."""
    meta = {k: doc["metadata"][k] for k in ("name", "namespace") if k in doc["metadata"]}
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": meta}


def training_job(cfg: RootConfig, names: Names) -> dict[str, Any]:
    """The PaddleJob of `recrun submit`, writing into this run's folder and resuming from its
    checkpoint when the step is retried."""
    job = manifests.submitted_paddlejob(cfg, names)
    extra = [f"runner.output_dir={run_dir(cfg)}", "runner.resume=true"]
    for role in ("ps", "worker"):
        if role in job["spec"]:
            container = job["spec"][role]["template"]["spec"]["containers"][0]
            container["command"] = [*container["command"], *extra]
    return job


def serving_resource(cfg: RootConfig, canary: bool) -> dict[str, Any]:
    """The serving resource on this run's export; KServe's with the canary split (`canary`)
    and tag routing (the smoke step reaches the new revision alone)."""
    k = copy.deepcopy(cfg)
    k.serving.k8s.model_path = f"{run_dir(cfg)}/export"
    doc = serving_k8s.render(k)
    if doc["kind"] == "InferenceService":
        doc["metadata"].setdefault("annotations", {})[TAG_ROUTING] = "true"
        if canary:
            doc["spec"]["predictor"]["canaryTrafficPercent"] = cfg.pipeline.canary_percent
    return doc


def templates(cfg: RootConfig, names: Names) -> list[dict[str, Any]]:
    job = training_job(cfg, names)
    kserve = cfg.serving.k8s.kind == ServingKind.InferenceService
    out: list[dict[str, Any]] = []
    main: list[list[dict[str, Any]]] = []
    if (sample := manifests.samplejob(cfg, names)) is not None:
        # A new SampleJob each run (the operator runs one once); owned: gone with the run.
        sample["metadata"]["generateName"] = f"{sample['metadata'].pop('name')}-"
        out.append(resource("warmup", "create", sample, success="status.phase == Succeeded",
                            failure="status.phase == Failed", owned=True))
        main.append([{"name": "warmup", "template": "warmup"}])
    main += [[{"name": "data", "template": "data"}],
             [{"name": "train", "template": "train"}],
             [{"name": "gate", "template": "gate"}],
             [{"name": "release", "template": "release"}],
             [{"name": "smoke", "template": "smoke"}],
             [{"name": "promote", "template": "promote"}]]
    if kserve:
        main.append([{"name": "full-traffic", "template": "full-traffic"}])
    out.insert(0, {"name": "pipeline", "steps": main})
    out += [step_template(cfg, names, s) for s in ("data", "gate", "smoke", "promote")]
    out.append({"name": "train",
                "retryStrategy": {"limit": str(cfg.pipeline.retries), "retryPolicy": "Always"},
                "steps": [[{"name": "remove-failed", "template": "remove-job"}],
                          [{"name": "run", "template": "run-job"}]]})
    out.append(resource("remove-job", "delete", reference(job), flags=["--ignore-not-found"]))
    # Owned by the Workflow: deleting a run (`recrun delete --pipeline`) takes its job along.
    out.append(resource("run-job", "create", job, success="status.phase == Completed",
                        failure="status.phase in (Failed, Aborted)", owned=True))
    out.append(resource("release", "apply", serving_resource(cfg, canary=kserve)))
    if kserve:
        out.append(resource("full-traffic", "apply", serving_resource(cfg, canary=False)))
    out.append({"name": "on-exit", "steps": [[{"name": "remove-training",
                                               "template": "remove-job"}],
                                             [{"name": "report", "template": "report"}]]})
    out.append(recrun_template(cfg, names, "report", [
        "pipeline", "--report", "{{workflow.status}}", "--config-file", config_path(cfg),
        f"runner.output_dir={run_dir(cfg)}"]))
    return out


def workflow_spec(cfg: RootConfig, names: Names) -> dict[str, Any]:
    placement = manifests.pod_placement(cfg.cluster)
    placement.pop("serviceAccountName", None)  # the workflow's own, below
    volumes = [v for v in manifests.pod_template(cfg, names, "worker")["spec"]["volumes"]
               if v["name"] != "dshm"]
    if names.sampleset:  # the Paddle Operator serves a SampleSet as a claim of its name
        volumes.append({"name": SAMPLESET_VOLUME, "persistentVolumeClaim": {
            "claimName": names.sampleset, "readOnly": True}})
    return {"entrypoint": "pipeline", "onExit": "on-exit",
            "serviceAccountName": names.pipeline,
            **placement,
            "synchronization": {"mutexes": [{"name": names.job}]},
            "volumes": volumes,
            "templates": templates(cfg, names)}


def workflow(cfg: RootConfig, names: Names, workflow_name: str | None) -> Doc | None:
    """One run, named when submitted (`workflow_name`: <names.pipeline>-<UTC time>)."""
    if cfg.pipeline.schedule:
        return None  # the CronWorkflow starts them
    name = workflow_name or f"{names.pipeline}-run"
    return {"apiVersion": ARGO_API, "kind": "Workflow",
            "metadata": manifests.metadata(name, names, COMPONENT),
            "spec": workflow_spec(cfg, names)}


def cron_workflow(cfg: RootConfig, names: Names) -> Doc | None:
    if not cfg.pipeline.schedule:
        return None
    return {"apiVersion": ARGO_API, "kind": "CronWorkflow",
            "metadata": manifests.metadata(names.pipeline, names, COMPONENT),
            "spec": {"schedules": [cfg.pipeline.schedule.strip()],
                     # A run still going when the next is due: the next is skipped.
                     "concurrencyPolicy": "Forbid",
                     "workflowMetadata": {"labels": manifests.labels(names, COMPONENT)},
                     "workflowSpec": workflow_spec(cfg, names)}}


# --- the workflow's identity: exactly what its templates do -------------------------------

# kubectl's verbs for each resource action (Argo runs kubectl in the step's pod); a success or
# failure condition reads the object until it holds.
ACTION_VERBS = {"create": ("create",), "apply": ("get", "create", "patch"),
                "delete": ("get", "delete"), "patch": ("get", "patch")}
WAIT_VERBS = ("get", "list", "watch")
# Argo's executor reports each step's outputs in a WorkflowTaskResult.
EXECUTOR = {"WorkflowTaskResult": ("create", "patch")}


def grants(spec: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Kind -> verbs the workflow's pods need, from its resource templates."""
    import yaml

    out: dict[str, set[str]] = {k: set(v) for k, v in EXECUTOR.items()}
    for template in spec["templates"]:
        res = template.get("resource")
        if not res:
            continue
        kind = yaml.safe_load(res["manifest"])["kind"]
        verbs = out.setdefault(kind, set())
        verbs.update(ACTION_VERBS[res["action"]])
        if res.get("successCondition") or res.get("failureCondition"):
            verbs.update(WAIT_VERBS)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def service_account(cfg: RootConfig, names: Names) -> Doc:
    return rbac.service_account(names.pipeline, names.namespace,
                                manifests.labels(names, COMPONENT))


def role(cfg: RootConfig, names: Names) -> Doc:
    """Least privilege: the verbs its resource templates use on the kinds they touch."""
    return rbac.role_for(grants(workflow_spec(cfg, names)), names.pipeline, names.namespace,
                         manifests.labels(names, COMPONENT))


def role_binding(cfg: RootConfig, names: Names) -> Doc:
    return rbac.binding(role(cfg, names), names.pipeline, names.namespace)
