"""The search: inter-operator stage DP and intra-operator Optuna studies (the library entry
points are ``autotune.search(...)`` and ``autotune.resume(...)`` in autotune.search.api)."""
