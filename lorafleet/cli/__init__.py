"""The command line: parses arguments, calls one core function, renders the result."""
