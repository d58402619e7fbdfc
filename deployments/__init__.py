"""Ray Serve deployments of the online path: the router and the engine pools."""
