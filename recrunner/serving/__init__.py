"""Online serving: an HTTP server for exports (Paddle Serving protocol, raw rows), its
PaddleService for Kubernetes, and the `bench-serve` load client."""
