"""The command-line interface: a thin layer over the library that turns typed errors into messages."""
