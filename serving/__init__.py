"""The request path's logic, with no Ray Serve in it: admission, routing, scenarios, metering,
tenants and budgets, a CPU engine's settings. Beside autoscaling/ and cluster/: imports those and
core/, never Ray Serve, Ray's LLM library, vLLM or core.upstream (tests/unit/test_import_layers.py)."""
