"""What every stage uses: config parsing, atomic file writes, errors, weight files, and where figures go."""
