"""Backends that need nothing but torch, registered as built-in plugins."""
