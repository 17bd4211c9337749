"""The embedded server: private redis-server processes for the default, the demo and tests."""
