"""Quality as the third corner of the trade: `trilemma bench quality` scores each pool through
the running app, beside what the same pool costs and how fast it answers."""
