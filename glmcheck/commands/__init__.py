"""CLI command handlers: argparse namespace in, library calls, printed tables and records out."""
