"""`trilemma bench replay`: production LLM request traces replayed against the app."""
