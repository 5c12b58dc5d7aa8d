"""Regenerate recrunner/serving/proto/*_pb2.py from the .proto files beside them.

    python tools/gen_protos.py

Uses grpcio-tools' bundled protoc. The generated modules are committed: installing recrunner
then needs no protoc, and the gencode version is chosen here, not by whatever grpcio-tools a
user has. Pin grpcio-tools to a release whose protobuf is <= the runtime's (5.29: grpcio-tools
1.67) so the runtime check in the generated code passes.
"""

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parents[1] / "recrunner" / "serving" / "proto"


def main() -> int:
    for proto in sorted(PROTO_DIR.glob("*.proto")):
        code = protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={PROTO_DIR}",
                            f"--pyi_out={PROTO_DIR}", str(proto)])
        if code:
            print(f"protoc failed on {proto}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
