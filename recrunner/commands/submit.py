"""`recrun submit cluster=k8s`: render the PaddleJob and its resources, then apply or print them."""

import argparse

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

KEYS = ["cluster.namespace", "cluster.job_name", "cluster.image", "cluster.scheduler",
        "cluster.queue", "cluster.resources.worker.gpus", "cluster.juicefs.secrets_file",
        "dataset.sampleset.name", "mode.name", "mode.nproc", "mode.servers", "mode.trainers"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="print the documents as multi-document YAML; contact no server")
    parser.add_argument("-o", "--output-dir", metavar="DIR",
                        help="write one YAML file per resource into DIR (contacts no server)")
    parser.add_argument("--show-secrets", action="store_true",
                        help="print/write the Secret's credentials instead of <redacted>")
    parser.add_argument("--wait", action="store_true",
                        help="follow the PaddleJob (a watch): exit 0 when Completed, 1 when Failed")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import FAILED, SUCCEEDED, Kube, Ref

    offline = args.dry_run or args.output_dir
    if args.wait and offline:
        raise RecrunnerError("--wait follows a submitted job: drop --dry-run / -o")
    # Everything is checked before anything is sent.
    rendered = ops.render(cfg, dry_run=bool(offline))
    for text in rendered.notes:
        ops.note(text)
    names = rendered.names
    if offline:
        ops.emit_offline(rendered, args.output_dir, args.show_secrets, "recrun submit")
        return 0

    kube = Kube(cfg.cluster.context, secrets=rendered.secret_values)
    job_ref = Ref.to("PaddleJob", names.job, names.namespace)
    existing = kube.get(job_ref)
    phase = ((existing or {}).get("status") or {}).get("phase")
    if phase in SUCCEEDED + FAILED:
        raise RecrunnerError(
            f"{job_ref} in namespace {names.namespace} already finished ({phase}) and the "
            "operator does not run it again: `recrun delete` it first (same overrides), or set "
            "cluster.job_name to a new name")
    for doc in rendered.docs:
        result = kube.apply(doc)
        print(f"{doc['kind'].lower()}/{doc['metadata']['name']} {result}")
    if args.wait:
        return kube.wait(job_ref, cfg.cluster.wait_timeout_s)
    print(f"follow it with `recrun status` / `recrun logs` and the same overrides "
          f"(namespace {names.namespace}, job {names.job})")
    return 0
