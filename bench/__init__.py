"""Benchmark harness: load generation, metrics and reports for OpenAI-compatible endpoints."""
