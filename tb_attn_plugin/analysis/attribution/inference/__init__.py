"""Attention found in traces without our scopes: modules, blocks, layer numbers, serving engines."""
