"""One measured call, and its adapters: the engine's runs and a user's watched call."""
