"""The bottom layer: config models, prices, the embedded model store, errors, the metrics text,
the wire contract (wire.py) and everything taken from Ray's and vLLM's internals (upstream.py).
Imports nothing of ours outside itself; everything else may import it."""
