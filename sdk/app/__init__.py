"""The application: the ``sdk`` command line, its live display, the demo and the plugin
template."""
