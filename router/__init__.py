"""The router deployment (the app's ingress) and its decisions: which model, scenario, pool
and replica serve a request, what it may cost, and the answer relayed to the client."""
