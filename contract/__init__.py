"""What the router and the pools agree on about one request: its timeline, its usage events,
the faults a pool reports, and the metrics both export."""
