"""Result records: writing and reading them (`store`), reports, tables, plots, run environment and
resumable progress."""
