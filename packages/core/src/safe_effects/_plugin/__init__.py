"""The pytest plugin's parts; ``safe_effects.pytest_plugin`` is the module pytest loads."""
