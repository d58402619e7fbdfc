"""Offline jobs beside the online app on the same Ray cluster. The top layer: may import
everything of the product (serve_app/ to start an app for a sample run); imported by bench/
and tests/ only."""
