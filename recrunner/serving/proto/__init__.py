"""Wire-compatible .proto files of the protocols `recrun serve` speaks and their generated
message modules (`python tools/gen_protos.py` regenerates them; committed so that installing
recrunner needs no protoc). Services are registered by name in serving/grpc_server.py, so no
generated gRPC stubs are needed."""
