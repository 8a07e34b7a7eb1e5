"""The OpenEnv server of the counter environment."""
