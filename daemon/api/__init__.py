"""The daemon's local API: operations, the Unix-socket server, and clients with a fallback."""
