"""Reconciliation's tables and schedules."""
