"""`sparkpoint ui`: the operator's page, served from the same library functions the CLI calls."""
