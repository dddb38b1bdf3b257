"""A tiny stand-in for a model library: slow pure-Python code we are not allowed to fork."""
