"""``fedaudit audit``: every attack against every defended copy of one update, as one matrix."""
