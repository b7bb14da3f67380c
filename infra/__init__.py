"""The ground floor: wire format, counter model, ports and their adapters, settings, and the
local runners every upper floor shares (embedded Postgres, the HTTP server)."""

__version__ = "0.1.0"
