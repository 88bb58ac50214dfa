"""The data and the rules: the run-report model, the check API, the verdict, configuration. No I/O beyond files; imports no transport, no reporter and no check."""
