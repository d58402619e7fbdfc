"""A pool replica: admission, metering, stream batching and sleep around its vLLM engine,
and the Serve deployment that runs it."""
