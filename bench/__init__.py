"""The benchmark harness, beside the product: load generation, metrics, reports and the A/B
runs. May import everything; nothing in the product imports it (tests do) (`trilemma bench` is an entry point of the
group `trilemma.commands`). Its results are written under bench/results/."""
