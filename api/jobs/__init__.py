"""What the routes render of a job beyond its row: its timeline of states, its training
summary, and what a caller may see of other tenants' jobs (`redaction`)."""
