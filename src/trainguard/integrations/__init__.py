"""Integrations with other tools (Keras callback, Optuna, pytest plugin), each imported lazily."""
