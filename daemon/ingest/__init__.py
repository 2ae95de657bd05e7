"""Discovering transcripts and following them into the store, exactly once."""
