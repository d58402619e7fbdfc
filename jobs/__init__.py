"""Offline jobs that run beside the online app on the same Ray cluster."""
