"""The ``tcemu`` command-line tool."""
