"""Installed copies of the top-level ``tasks/`` and ``pairs/`` registry folders."""
