"""Batch summarization of a corpus: through the app's lowest-priority scenario or its own engines."""
