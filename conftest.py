# Service fixtures (database, identity provider, …) shared by tests/ and e2e/.
pytest_plugins = ["tests.services"]
