"""Autoscaling on latency, utilization and cost: pool signals in, scaling decisions out. Pure
logic beside serving/ and cluster/: imports those and core/, never Ray Serve or vLLM (the policy
Ray Serve's controller runs is plain code); Ray core only for the control board and the decision metrics."""
