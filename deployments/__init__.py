"""The Ray Serve deployments of the online path: the router and the engine pools, with what
runs only inside them (metrics, accounting, the replica router, the KV-cache probe). May import
serving/, autoscaling/, cluster/ and core/; nothing below imports it."""
