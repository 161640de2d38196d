"""What a topic's database-tier tests (tests/db) and process-tier tests (tests/process) share:
helpers, and fixtures loaded for the whole suite by tests/conftest.py's ``pytest_plugins``."""
