"""Helpers the test files share: the session's cache of profiled fixture runs (``profiled``)."""
