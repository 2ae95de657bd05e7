"""Agent hooks: the fast `memoryd hook` entry point, its fallback, and settings installers."""
