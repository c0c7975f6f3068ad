"""One module per ``ofa`` verb; `ofa.cli` discovers them."""
