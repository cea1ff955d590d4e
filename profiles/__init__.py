"""Device profiles shipped as package data (TOML, one file per device)."""
