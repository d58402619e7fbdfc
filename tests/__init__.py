"""Tests in tiers: unit (pure logic), integration (a real Ray Serve app with tests.fake_engine),
e2e (the real vLLM engine and model). The top: may import everything; nothing imports it."""
