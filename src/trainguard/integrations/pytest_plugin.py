"""pytest plugin (placeholder until the leakcheck plugin lands). Inert unless asked for."""
