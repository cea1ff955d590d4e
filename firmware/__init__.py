"""Firmware sources and templates shipped as package data (C99, no heap)."""
