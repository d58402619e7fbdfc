"""The vLLM engine's life in a replica: preload, the CPU engine's settings, its processes and
ports, the compile cache, and the engine class the pools run."""
