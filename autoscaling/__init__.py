"""Autoscaling on latency, utilization and cost: pool signals in, scaling decisions out. Pure
logic beside contract/, cluster/ and observability/, independent of them: imports core/ only,
never Ray Serve or vLLM (the policy Ray Serve's controller runs is plain code); Ray core only for
the control board and the decision metrics."""
