"""L0: every captured conversation message, verbatim after sanitising."""
