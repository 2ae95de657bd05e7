"""memoryd: a background daemon that gives AI coding agents a durable memory."""

__version__ = "0.1.0"
