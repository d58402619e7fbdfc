"""The cluster beneath the app: node types and prices, what each pool needs, the cheapest plan,
the launcher and KubeRay configs, live cloud prices. Logic beside contract/,
autoscaling/ and observability/, independent of them: imports core/ only."""
