"""Trilemma's online app: config, app builder and HTTP surface."""
