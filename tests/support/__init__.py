"""Helpers and models the tests share (not tests themselves)."""
