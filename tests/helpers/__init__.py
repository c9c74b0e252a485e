"""Helpers shared by the test modules (plain functions and classes; fixtures stay in
tests/conftest.py). Import them as ``from helpers.<module> import ...``: pytest puts tests/ on
``sys.path``."""
