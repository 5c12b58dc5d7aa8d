"""Write k8s/rbac.yaml, the submitter's RBAC, from the kinds table (recrunner/k8s/kinds.py).

    python tools/render_rbac.py                      # rewrite k8s/rbac.yaml (namespace default)
    python tools/render_rbac.py --check              # exit 1 when it differs from the table
    python tools/render_rbac.py --namespace ctr -o - # for your namespace, to stdout

Run it after adding or changing a row of the table; tests/test_k8s_kinds.py fails until then.
"""

import argparse
import sys
from pathlib import Path

from recrunner.k8s.rbac import submitter_yaml

RBAC_FILE = Path(__file__).resolve().parent.parent / "k8s" / "rbac.yaml"


def write(path: Path = RBAC_FILE, namespace: str = "default") -> bool:
    """Write the rendered file; True when it changed."""
    text = submitter_yaml(namespace)
    if path.is_file() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="default", help="the submitter's namespace")
    parser.add_argument("-o", "--output", type=Path, default=RBAC_FILE,
                        help=f"where to write ('-': stdout; default {RBAC_FILE})")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the file differs from the table")
    args = parser.parse_args(argv)
    if str(args.output) == "-":
        sys.stdout.write(submitter_yaml(args.namespace))
        return 0
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != submitter_yaml(args.namespace):
            print(f"{args.output} is stale: run python tools/render_rbac.py", file=sys.stderr)
            return 1
        return 0
    changed = write(args.output, args.namespace)
    print(f"{args.output} {'written' if changed else 'unchanged'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
