"""Sphinx configuration of the API reference (built in the tests:
tests/project/test_api_docs.py)."""

project = "sdk"
extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
exclude_patterns = ["_build"]
html_theme = "alabaster"
# ``type[Harness]`` in a signature would also match the ``type`` attributes of Column and
# WideTemporal: ambiguous, not wrong, so that one kind of warning is not an error
suppress_warnings = ["ref.python"]
