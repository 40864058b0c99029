"""Development tools run by make targets; not part of the installed package."""
