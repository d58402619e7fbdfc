"""The bottom layer: config models, prices, the embedded model store, errors, the metrics text,
the wire contract (wire.py), every import from Ray's and vLLM's internals (upstream.py) and
the configuration reference written from the config models (config_reference.py).
Imports nothing of ours outside itself; everything else may import it."""
