"""The ground floor: wire format, counter model, ports and their adapters, settings."""
