"""Autoscaling on latency, utilization and cost: pool signals in, scaling decisions out."""
